"""LogSource: replayable partitions, offsets, re-splitting, growing files, bad lines."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import LogSource, MalformedRecordError, read_committed
from lockgate.runtime.api.connectors import SourceReader
from lockgate.runtime.connectors.log_partition import READ_CHUNK_BYTES, LogPartitionChangedError
from lockgate.runtime.connectors.partitions import owner

from tests.runtime.connectors.subtasks import JOB, open_reader, subtask_context


def _write(directory: Path, name: str, records: list[Any], mode: str = "w") -> None:
    with open(directory / name, mode) as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def _drain(reader: SourceReader, batch: int = 7) -> list[Any]:
    out: list[Any] = []
    while records := reader.poll(batch):
        out.extend(records)
    return out


@pytest.fixture
def log(tmp_path: Path) -> Path:
    directory = tmp_path / "log"
    directory.mkdir()
    for p in range(5):
        _write(directory, f"part-{p}.jsonl", [{"p": p, "i": i} for i in range(20)])
    return directory


def _all(log: Path) -> list[Any]:
    return sorted((p, i) for p in range(5) for i in range(20))


def _pairs(records: list[Any]) -> list[tuple[int, int]]:
    return sorted((r["p"], r["i"]) for r in records)


@pytest.mark.parametrize("parallelism", [1, 2, 3, 5, 7])
def test_subtasks_share_partitions_and_read_everything_once(log: Path, parallelism: int) -> None:
    source = LogSource(f"file://{log}")
    readers = [open_reader(source, i, parallelism, {}) for i in range(parallelism)]
    read = [r for reader in readers for r in _drain(reader)]
    assert _pairs(read) == _all(log)
    assert all(reader.reached_end() for reader in readers)


def test_each_partition_is_read_in_order(log: Path) -> None:
    records = _drain(open_reader(LogSource(f"file://{log}"), 0, 1, {}))
    for p in range(5):
        assert [r["i"] for r in records if r["p"] == p] == list(range(20))


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 4)])
def test_restored_offsets_resume_exactly_at_another_parallelism(log: Path, before: int, after: int) -> None:
    source = LogSource(f"file://{log}")
    readers = [open_reader(source, i, before, {}) for i in range(before)]
    first = [r for reader in readers for r in reader.poll(23)]
    # Offsets are union state: every new subtask sees all of them.
    offsets = {name: o for reader in readers for name, o in reader.offsets().items()}
    resumed = [open_reader(source, i, after, offsets) for i in range(after)]
    rest = [r for reader in resumed for r in _drain(reader)]
    assert _pairs(first + rest) == _all(log)


def test_growing_files_and_new_partitions_are_followed(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    assert len(_drain(reader)) == 100
    assert reader.reached_end()
    _write(log, "part-0.jsonl", [{"p": 0, "i": 20}], mode="a")
    _write(log, "part-9.jsonl", [{"p": 9, "i": 0}])
    assert not reader.reached_end()
    assert _pairs(_drain(reader)) == [(0, 20), (9, 0)]


def test_a_line_still_being_written_waits_for_its_newline(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    _drain(reader)
    with open(log / "part-1.jsonl", "a") as f:
        f.write('{"p": 1, "i"')
    assert _drain(reader) == []
    with open(log / "part-1.jsonl", "a") as f:
        f.write(": 20}\n")
    assert _drain(reader) == [{"p": 1, "i": 20}]


def test_malformed_line_names_file_and_line(log: Path) -> None:
    with open(log / "part-2.jsonl", "a") as f:
        f.write("{not json\n")
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    with pytest.raises(MalformedRecordError, match=r"part-2\.jsonl:21: not a JSON document"):
        _drain(reader)


def _checkpoint(reader: SourceReader, checkpoint_id: int) -> list[Any]:
    """As the engine does at a barrier and at the checkpoint's completion."""
    committables = reader.pre_commit(checkpoint_id)
    reader.commit(committables)
    return committables


def test_malformed_lines_go_to_the_dead_letter_directory(log: Path, tmp_path: Path) -> None:
    with open(log / "part-2.jsonl", "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"p": 2, "i": 20}) + "\n")
    dead = f"file://{tmp_path}/dead"
    reader = open_reader(LogSource(f"file://{log}", dead_letter=dead), 0, 1, {})
    records = _drain(reader)
    assert (2, 20) in _pairs(records)
    assert len(records) == 101
    assert read_committed(dead) == [], "visible only once its checkpoint completes"
    _checkpoint(reader, 1)
    (letter,) = read_committed(dead)
    assert letter["source"].endswith("part-2.jsonl:21")
    assert letter["line"] == "{not json"


def test_a_replay_after_a_restore_writes_no_dead_letter_twice(log: Path, tmp_path: Path) -> None:
    """The first launch reads the bad line and pre-commits its dead letter for
    checkpoint 2, which never completes; the second restores checkpoint 1 (taken
    before the bad line), reads it again, and its recovery discards the first
    launch's pending dead letter."""
    dead = f"file://{tmp_path}/dead"
    source = LogSource(f"file://{log}", dead_letter=dead)
    first = source.open_reader(subtask_context(0, 1, launch=1), {})
    _drain(first)
    _checkpoint(first, 1)
    offsets = first.offsets()
    with open(log / "part-2.jsonl", "a") as f:
        f.write("{not json\n")
    assert _drain(first) == []
    first.pre_commit(2)  # the barrier of checkpoint 2; the launch fails before it completes

    second = source.open_reader(subtask_context(0, 1, launch=2), offsets)
    second.recover([])  # checkpoint 1 pre-committed no dead letter
    assert _drain(second) == []
    _checkpoint(second, 3)
    (letter,) = read_committed(dead)
    assert letter["source"].endswith("part-2.jsonl:21")
    assert [p.name for p in (tmp_path / "dead").iterdir() if p.name.startswith((".", "_"))] == []


def test_an_unwritable_dead_letter_location_is_refused_before_anything_runs(log: Path) -> None:
    source = LogSource(f"file://{log}", dead_letter=f"file://{log}/part-0.jsonl/dead")
    with pytest.raises(ValueError, match=r"part-0\.jsonl, above it, is a file"):
        source.validate(JOB)


def test_a_relative_source_url_is_refused_when_the_source_is_made() -> None:
    with pytest.raises(ValueError, match="relative path"):
        LogSource("data/in")


def test_a_partition_that_shrinks_is_an_error(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    _drain(reader)
    (log / "part-3.jsonl").write_text("")
    with pytest.raises(LogPartitionChangedError, match=r"part-3\.jsonl shrank to 0 bytes.*only grow"):
        _drain(reader)


def test_a_new_partition_moves_no_partition_being_read(tmp_path: Path) -> None:
    """part-10 sorts between part-1 and part-2: a split by sorted position would hand
    part-2 to the other subtask, which would read it again from offset 0."""
    log = tmp_path / "log"
    log.mkdir()
    for p in range(4):
        _write(log, f"part-{p}.jsonl", [{"p": p, "i": i} for i in range(10)])
    source = LogSource(f"file://{log}")
    readers = [open_reader(source, i, 2, {}) for i in range(2)]
    before = [r for reader in readers for r in _drain(reader)]
    owners = {name: owner(name, 2) for name in readers[0].offsets().keys() | readers[1].offsets().keys()}
    _write(log, "part-10.jsonl", [{"p": 10, "i": 0}])
    for p in range(4):
        _write(log, f"part-{p}.jsonl", [{"p": p, "i": 10}], mode="a")
    after = [r for _ in range(2) for reader in readers for r in _drain(reader)]  # new ones on an empty poll
    assert {name: owner(name, 2) for name in owners} == owners
    assert sorted(_pairs(before + after)) == sorted(
        [(p, i) for p in range(4) for i in range(11)] + [(10, 0)]
    ), "every record once"
    assert {len(reader.offsets()) for reader in readers} == {2, 3}, "numbered partitions split evenly"


def test_unnumbered_partitions_are_assigned_by_a_stable_hash() -> None:
    names = [f"events-{c}.jsonl" for c in "abcdefgh"]
    assert all(0 <= owner(n, 3) < 3 for n in names)
    assert [owner(n, 3) for n in names] == [owner(n, 3) for n in reversed(names)][::-1]
    assert owner("part-7.jsonl", 4) == 3


@pytest.mark.parametrize("bounded_check", [False, True])
def test_a_line_longer_than_a_read_chunk_is_read_whole(tmp_path: Path, bounded_check: bool) -> None:
    log = tmp_path / "log"
    log.mkdir()
    big = {"p": 0, "blob": "x" * (3 * READ_CHUNK_BYTES)}
    _write(log, "part-0.jsonl", [{"p": 0, "i": 0}, big, {"p": 0, "i": 2}])
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    if bounded_check:
        assert not reader.reached_end(), "unread input is not the end"
    records = _drain(reader, batch=1)
    assert [len(r.get("blob", "")) for r in records] == [0, 3 * READ_CHUNK_BYTES, 0]
    assert reader.reached_end()
    assert reader.offsets()["part-0.jsonl"]["byte"] == (log / "part-0.jsonl").stat().st_size


def test_a_file_rewritten_under_its_name_is_refused(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    _drain(reader)
    path = log / "part-1.jsonl"
    content = path.read_bytes()
    path.write_bytes(content.replace(b'"p": 1', b'"p": 7') + b'{"p": 7, "i": 99}\n')  # in place, larger
    with pytest.raises(LogPartitionChangedError, match=r"part-1\.jsonl was rewritten"):
        _drain(reader)


def test_a_rotated_file_is_refused_even_with_the_same_first_bytes(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    _drain(reader)
    path = log / "part-1.jsonl"
    content = path.read_bytes()
    path.rename(log / "old-part-1.jsonl")  # rotated away: another file takes the name
    path.write_bytes(content + b'{"p": 1, "i": 20}\n')
    with pytest.raises(LogPartitionChangedError, match=r"part-1\.jsonl was replaced by another file"):
        _drain(reader)


def test_a_restored_offset_is_not_applied_to_another_file(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    reader.poll(30)
    offsets = reader.offsets()
    path = log / "part-0.jsonl"
    path.write_text("".join(json.dumps({"p": 0, "i": -i}) + "\n" for i in range(40)))
    resumed = open_reader(LogSource(f"file://{log}"), 0, 1, offsets)
    with pytest.raises(LogPartitionChangedError, match=r"part-0\.jsonl was"):
        _drain(resumed)


def test_a_deleted_partition_is_an_error_naming_it(log: Path) -> None:
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    _drain(reader)
    offsets = reader.offsets()
    (log / "part-4.jsonl").unlink()
    with pytest.raises(LogPartitionChangedError, match=r"part-4\.jsonl was deleted after \d+ bytes"):
        reader.backlog()
    with pytest.raises(LogPartitionChangedError, match=r"part-4\.jsonl was deleted"):
        _drain(open_reader(LogSource(f"file://{log}"), 0, 1, offsets))


def test_the_last_line_without_a_newline_is_read_at_the_end_of_bounded_input(log: Path) -> None:
    with open(log / "part-2.jsonl", "a") as f:
        f.write('{"p": 2, "i": 20}')
    reader = open_reader(LogSource(f"file://{log}"), 0, 1, {})
    assert len(_drain(reader)) == 100, "unbounded: it waits for its newline"
    assert reader.reached_end()
    assert reader.end_of_input() == [{"p": 2, "i": 20}]
    assert reader.offsets()["part-2.jsonl"]["byte"] == (log / "part-2.jsonl").stat().st_size
    assert reader.end_of_input() == []


def test_invalid_utf8_is_a_malformed_line(log: Path, tmp_path: Path) -> None:
    with open(log / "part-3.jsonl", "ab") as f:
        f.write(b'{"p": 3, "i": "\xff\xfe"}\n')
    with pytest.raises(MalformedRecordError, match=r"part-3\.jsonl:21: not a JSON document"):
        _drain(open_reader(LogSource(f"file://{log}"), 0, 1, {}))
    dead = f"file://{tmp_path}/dead"
    reader = open_reader(LogSource(f"file://{log}", dead_letter=dead), 0, 1, {})
    assert len(_drain(reader)) == 100
    _checkpoint(reader, 1)
    (letter,) = read_committed(dead)
    assert letter["source"].endswith("part-3.jsonl:21")


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("missing", r"log does not exist \(LogSource reads the files matching 'part-\*\.jsonl'"),
        ("a file", r"log is a file, not a directory"),
        ("misnamed", r"no file in file://.*/log matches 'part-\*\.jsonl' \(it holds transactions\.jsonl\)"),
        ("empty", r"no file in file://.*/log matches 'part-\*\.jsonl' \(it holds nothing\)"),
    ],
)
def test_a_location_with_nothing_to_read_says_where_and_what_it_looks_for(
    tmp_path: Path, layout: str, says: str
) -> None:
    location = tmp_path / "log"
    if layout == "a file":
        location.write_text("{}\n")
    elif layout != "missing":
        location.mkdir()
    if layout == "misnamed":
        _write(location, "transactions.jsonl", [{"i": 1}])
    problem = LogSource(f"file://{location}").missing_input()
    assert problem is not None
    assert re.search(says, problem), problem


def test_a_location_with_a_matching_file_has_input(log: Path) -> None:
    assert LogSource(f"file://{log}").missing_input() is None
    assert LogSource(f"file://{log}", pattern="*.csv").missing_input() is not None


def test_an_unbounded_reader_with_nothing_to_read_warns_once_an_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "log").mkdir()
    _write(tmp_path / "log", "transactions.jsonl", [{"i": 1}])
    with caplog.at_level(logging.WARNING, logger="lockgate.runtime.connectors.log_source"):
        reader = open_reader(LogSource(f"file://{tmp_path}/log"), 0, 1)
        assert reader.poll(10) == []
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, "the second look within the interval stays quiet"
    assert "matches 'part-*.jsonl' (it holds transactions.jsonl)" in warnings[0]
