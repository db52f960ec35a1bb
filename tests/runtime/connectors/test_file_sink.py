"""FileSink: two-phase commit, invisible until committed, exactly once after recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime import FileSink, read_committed
from lockgate.runtime.connectors.file_sink import SinkCommitError


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith((".", "_")))


def test_records_appear_only_when_their_checkpoint_commits(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    writer = sink.create_writer(0, 1)
    writer.write({"a": 1})
    writer.write({"a": 2})
    assert read_committed(sink.url) == []
    committables = writer.pre_commit(1)
    writer.write({"a": 3})  # the next epoch
    assert read_committed(sink.url) == []
    writer.commit(committables)
    assert read_committed(sink.url) == [{"a": 1}, {"a": 2}]
    writer.commit(committables)  # idempotent
    assert read_committed(sink.url) == [{"a": 1}, {"a": 2}]
    assert writer.pre_commit(2) != []
    assert writer.pre_commit(3) == [], "an empty epoch commits nothing"


def test_recovery_commits_pre_committed_and_discards_the_rest(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    crashed = sink.create_writer(0, 1)
    crashed.write({"epoch": 1})
    in_checkpoint = crashed.pre_commit(1)  # checkpoint 1 completes, but the commit never ran
    crashed.write({"epoch": 2})  # lost with the crash: replayed from the source
    restarted = sink.create_writer(0, 1)
    restarted.recover(in_checkpoint)
    assert read_committed(sink.url) == [{"epoch": 1}]
    hidden = [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith((".", "_"))]
    assert hidden == []


def test_recovery_at_another_parallelism_commits_every_share(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    old = [sink.create_writer(i, 3) for i in range(3)]
    union = []
    for i, writer in enumerate(old):
        writer.write({"from": i})
        union += writer.pre_commit(7)
        writer.write({"uncommitted": i})
    new = [sink.create_writer(i, 2) for i in range(2)]
    for writer in new:
        writer.recover(union)
    assert sorted(r["from"] for r in read_committed(sink.url)) == [0, 1, 2]
    assert len(_visible(tmp_path / "out")) == 3
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith((".", "_"))]


def test_recovery_leaves_the_new_attempts_files_alone(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    a, b = sink.create_writer(0, 2), sink.create_writer(1, 2)
    a.recover([])
    b.write({"new": 1})  # b is already writing when a (or a late b) recovers
    a.recover([])
    b.commit(b.pre_commit(1))
    assert read_committed(sink.url) == [{"new": 1}]


def test_a_missing_pending_file_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    writer = sink.create_writer(0, 1)
    writer.write({"a": 1})
    committables = writer.pre_commit(1)
    for path in (tmp_path / "out").iterdir():
        path.unlink()
    with pytest.raises(SinkCommitError, match="missing"):
        writer.commit(committables)


def test_a_closed_transaction_takes_no_records(tmp_path: Path) -> None:
    writer = FileSink(f"file://{tmp_path}/out").create_writer(0, 1)
    writer.write({"a": 1})
    writer.close()
    assert read_committed(f"file://{tmp_path}/out") == []
    with pytest.raises(RuntimeError, match="aborted"):
        writer.write({"a": 2})


def test_invalid_prefix() -> None:
    with pytest.raises(ValueError, match="prefix"):
        FileSink("file:///x", prefix=".hidden")
