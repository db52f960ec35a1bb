"""LogSource: replayable partitions, offsets, re-splitting, growing files, bad lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import LogSource, MalformedRecordError
from lockgate.runtime.api.connectors import SourceReader


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
    readers = [source.open_reader(i, parallelism, {}) for i in range(parallelism)]
    read = [r for reader in readers for r in _drain(reader)]
    assert _pairs(read) == _all(log)
    assert all(reader.reached_end() for reader in readers)


def test_each_partition_is_read_in_order(log: Path) -> None:
    records = _drain(LogSource(f"file://{log}").open_reader(0, 1, {}))
    for p in range(5):
        assert [r["i"] for r in records if r["p"] == p] == list(range(20))


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 4)])
def test_restored_offsets_resume_exactly_at_another_parallelism(log: Path, before: int, after: int) -> None:
    source = LogSource(f"file://{log}")
    readers = [source.open_reader(i, before, {}) for i in range(before)]
    first = [r for reader in readers for r in reader.poll(23)]
    # Offsets are union state: every new subtask sees all of them.
    offsets = {name: o for reader in readers for name, o in reader.offsets().items()}
    resumed = [source.open_reader(i, after, offsets) for i in range(after)]
    rest = [r for reader in resumed for r in _drain(reader)]
    assert _pairs(first + rest) == _all(log)


def test_growing_files_and_new_partitions_are_followed(log: Path) -> None:
    reader = LogSource(f"file://{log}").open_reader(0, 1, {})
    assert len(_drain(reader)) == 100
    assert reader.reached_end()
    _write(log, "part-0.jsonl", [{"p": 0, "i": 20}], mode="a")
    _write(log, "part-9.jsonl", [{"p": 9, "i": 0}])
    assert not reader.reached_end()
    assert _pairs(_drain(reader)) == [(0, 20), (9, 0)]


def test_a_line_still_being_written_waits_for_its_newline(log: Path) -> None:
    reader = LogSource(f"file://{log}").open_reader(0, 1, {})
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
    reader = LogSource(f"file://{log}").open_reader(0, 1, {})
    with pytest.raises(MalformedRecordError, match=r"part-2\.jsonl:21: not a JSON document"):
        _drain(reader)


def test_malformed_lines_go_to_the_dead_letter_file(log: Path, tmp_path: Path) -> None:
    with open(log / "part-2.jsonl", "a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"p": 2, "i": 20}) + "\n")
    dead = tmp_path / "dead" / "letters.jsonl"
    reader = LogSource(f"file://{log}", dead_letter=f"file://{dead}").open_reader(0, 1, {})
    records = _drain(reader)
    assert (2, 20) in _pairs(records)
    assert len(records) == 101
    (letter,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["source"].endswith("part-2.jsonl:21")
    assert letter["line"] == "{not json"


def test_a_partition_that_shrinks_is_an_error(log: Path) -> None:
    reader = LogSource(f"file://{log}").open_reader(0, 1, {})
    _drain(reader)
    (log / "part-3.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"part-3\.jsonl shrank.*append-only"):
        _drain(reader)
