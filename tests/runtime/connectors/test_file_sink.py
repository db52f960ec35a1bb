"""FileSink: two-phase commit, invisible until committed, exactly once after recovery,
and only its own job's files touched in a directory several jobs share."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import FileSink, ForwardingSinkWriter, JobIdentity, read_committed
from lockgate.runtime.connectors.file_sink import SinkCommitError
from lockgate.runtime.connectors.file_transaction import CHUNK_BYTES as CHUNK
from lockgate.runtime.connectors.sink_file_names import FileName

from tests.runtime.connectors.subtasks import JOB, open_writer
from tests.s3_server import s3_endpoint


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith((".", "_")))


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith((".", "_")))


def test_records_appear_only_when_their_checkpoint_commits(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    writer = open_writer(sink)
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


def test_a_batch_is_written_as_its_records_one_by_one_and_a_wrapper_sees_each(tmp_path: Path) -> None:
    """The engine hands a sink whole batches (`write_batch`); FileSink writes one
    as it writes the records one by one, and a `ForwardingSinkWriter` that
    overrides only `write` still sees every record."""
    seen: list[Any] = []

    class Watching(ForwardingSinkWriter):
        def write(self, record: Any) -> None:
            seen.append(record)
            super().write(record)

    records = [{"n": n, "s": "x" * (n % 7)} for n in range(1000)]
    by_batch = FileSink(f"file://{tmp_path}/batch")
    writer = open_writer(by_batch)
    writer.write_batch(records[:600])
    writer.write_batch(records[600:])
    writer.commit(writer.pre_commit(1))
    one_by_one = FileSink(f"file://{tmp_path}/single")
    watched = Watching(open_writer(one_by_one))
    watched.write_batch(records)
    watched.commit(watched.pre_commit(1))
    assert read_committed(by_batch.url) == records
    assert read_committed(one_by_one.url) == records
    assert seen == records


def test_an_empty_batch_commits_no_file(tmp_path: Path) -> None:
    """A filter before the sink may pass on nothing for a whole epoch."""
    sink = FileSink(f"file://{tmp_path}/out")
    writer = open_writer(sink)
    writer.write_batch([])
    assert writer.pre_commit(1) == []
    assert list((tmp_path / "out").iterdir()) == []


def test_recovery_commits_pre_committed_and_discards_the_rest(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    crashed = open_writer(sink, launch=1)
    crashed.write({"epoch": 1})
    in_checkpoint = crashed.pre_commit(1)  # checkpoint 1 completes, but the commit never ran
    crashed.write({"epoch": 2})  # lost with the crash: replayed from the source
    restarted = open_writer(sink, launch=2)
    restarted.recover(in_checkpoint)
    assert read_committed(sink.url) == [{"epoch": 1}]
    assert _hidden(tmp_path / "out") == []


def test_recovery_at_another_parallelism_commits_every_share(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    old = [open_writer(sink, i, 3, launch=1) for i in range(3)]
    union = []
    for i, writer in enumerate(old):
        writer.write({"from": i})
        union += writer.pre_commit(7)
        writer.write({"uncommitted": i})
    new = [open_writer(sink, i, 2, launch=2) for i in range(2)]
    for writer in new:
        writer.recover(union)
    assert sorted(r["from"] for r in read_committed(sink.url)) == [0, 1, 2]
    assert len(_visible(tmp_path / "out")) == 3
    assert _hidden(tmp_path / "out") == [], "each old subtask's leftovers had a new writer to delete them"


def test_recovery_leaves_the_files_of_its_own_launch_alone(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    a, b = open_writer(sink, 0, 2, launch=3), open_writer(sink, 1, 2, launch=3)
    a.recover([])
    b.write({"new": 1})  # b is already writing when a (or a late b) recovers
    a.recover([])
    b.recover([])
    b.commit(b.pre_commit(1))
    assert read_committed(sink.url) == [{"new": 1}]


def test_after_a_rescale_no_writer_deletes_a_live_peers_files(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    for i in range(4):  # launch 1 at parallelism 4 left in-progress files
        open_writer(sink, i, 4, launch=1).write({"lost": i})
    new = [open_writer(sink, i, 2, launch=2) for i in range(2)]
    new[1].recover([])
    new[1].write({"kept": 1})  # writing while its peer, started later, recovers
    new[0].recover([])
    new[1].commit(new[1].pre_commit(5))
    assert read_committed(sink.url) == [{"kept": 1}]
    assert _hidden(tmp_path / "out") == []


@pytest.mark.parametrize(
    "other",
    [
        JobIdentity("default", "job-b"),
        JobIdentity("staging", JOB.job),
        JobIdentity("default", f"{JOB.job}-1"),
    ],
    ids=["another job id", "the same id in another namespace", "an id this one's is a prefix of"],
)
def test_recovery_leaves_another_jobs_pending_files_to_commit(tmp_path: Path, other: JobIdentity) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    crashed = open_writer(sink, launch=1, job=other)
    crashed.write({"job": "other"})
    other_checkpoint = crashed.pre_commit(4)  # completed; the other job crashed before committing
    # Past a chunk, so each crashed writer left an in-progress file (smaller epochs
    # are still in memory when a writer dies).
    crashed.write({"job": "other", "lost": "x" * CHUNK})
    mine = open_writer(sink, launch=1)
    mine.write({"job": "mine", "lost": "x" * CHUNK})
    open_writer(sink, launch=2).recover([])  # this job restarts from nothing
    left = _hidden(tmp_path / "out")
    assert len(left) == 2, f"only the other job's pending and in-progress files are left: {left}"
    assert all(f"~{other.namespace}~{other.job}~" in name for name in left), left
    open_writer(sink, launch=2, job=other).recover(other_checkpoint)
    assert read_committed(sink.url) == [{"job": "other"}]
    assert _hidden(tmp_path / "out") == []


def test_recovery_leaves_a_live_writer_of_another_job_writing(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    other = open_writer(sink, 1, 2, launch=1, job=JobIdentity("default", "job-b"))
    other.write({"job": "other"})
    for subtask in range(2):
        open_writer(sink, subtask, 2, launch=5).recover([])
    other.commit(other.pre_commit(1))
    assert read_committed(sink.url) == [{"job": "other"}]


def test_a_deposed_launchs_late_writer_leaves_the_newer_launchs_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    newer = open_writer(sink, launch=2)
    newer.write({"launch": 2})
    committables = newer.pre_commit(9)
    late = open_writer(sink, launch=1)  # a task of the launch before, starting late
    with caplog.at_level(logging.WARNING, logger="lockgate.runtime.connectors.file_sink"):
        late.recover([])
    assert "from launches after this one (1)" in caplog.text
    newer.commit(committables)
    assert read_committed(sink.url) == [{"launch": 2}]


def test_a_probe_file_the_drivers_check_left_is_deleted_by_the_next_launch(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    sink.validate(JOB)
    probe = FileName(sink.prefix, JOB, 0, 0, "0123abcd", 0).in_progress  # the driver's: launch 0
    (tmp_path / "out" / probe).write_bytes(b"")  # as if the driver died between write and delete
    open_writer(sink, 1, 2, launch=1).recover([])
    assert _hidden(tmp_path / "out") == [probe], "subtask 0's share"
    open_writer(sink, 0, 2, launch=1).recover([])
    assert _hidden(tmp_path / "out") == []


def test_two_jobs_in_one_directory_never_make_the_same_final_name(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    for job in (JOB, JobIdentity("default", "job-b")):
        writer = open_writer(sink, launch=1, job=job)
        writer.write({"job": job.job})
        writer.commit(writer.pre_commit(1))
    names = _visible(tmp_path / "out")
    assert len(names) == 2
    assert [n.split("~")[:3] for n in names] == [["part", "default", "job-a"], ["part", "default", "job-b"]]


def test_a_missing_pending_file_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    sink = FileSink(f"file://{tmp_path}/out")
    writer = open_writer(sink)
    writer.write({"a": 1})
    committables = writer.pre_commit(1)
    for path in (tmp_path / "out").iterdir():
        path.unlink()
    with pytest.raises(SinkCommitError, match="missing"):
        writer.commit(committables)


def test_a_closed_transaction_takes_no_records(tmp_path: Path) -> None:
    writer = open_writer(FileSink(f"file://{tmp_path}/out"))
    writer.write({"a": 1})
    writer.close()
    assert read_committed(f"file://{tmp_path}/out") == []
    with pytest.raises(RuntimeError, match="aborted"):
        writer.write({"a": 2})


@pytest.mark.parametrize("prefix", [".hidden", "_hidden", "a/b", "a~b", ""])
def test_invalid_prefix(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        FileSink("file:///x", prefix=prefix)


def test_on_an_object_store_a_new_output_directory_recovers_and_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object store has no empty directories: a sink's new prefix lists as
    missing until something is under it. A first launch's recovery and reading
    the output must take that as empty (on S3 every first launch failed), and
    listings must be fresh: s3fs caches them per process, and other processes write."""
    with s3_endpoint(tmp_path / "moto.log") as s3:
        for name, value in s3.environment.items():
            monkeypatch.setenv(name, value)
        sink = FileSink(f"s3://{s3.bucket}/job/out")
        assert read_committed(sink.url) == []
        writer = open_writer(sink)
        writer.recover([])
        writer.write({"a": 1})
        writer.commit(writer.pre_commit(1))
        assert read_committed(sink.url) == [{"a": 1}]
        # another process (a subtask on another executor) commits a file of its own
        s3.filesystem().pipe(f"{s3.bucket}/job/out/part-other-chk1.jsonl", b'{"b": 2}\n')
        fresh = sorted(read_committed(sink.url), key=str)
        assert fresh == [{"a": 1}, {"b": 2}], "a listing cached earlier is not the truth"
