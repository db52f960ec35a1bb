"""Reading a job's state from the savepoint it stopped with: every state kind,
timers and windows come back as the rows the job's state held, on both backends."""

from __future__ import annotations

import importlib
import secrets
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.state import ReadOptions, SavedState, SavepointWriter, StateAccessError, open_snapshot
from lockgate.testing import Savepoint, run_job

from tests.state import jobs

RECORDS = jobs.records(60)


def write_savepoint(savepoint: Savepoint, directory: Path) -> str:
    """The savepoint's files under `directory`, as a cluster writes them; its URL."""
    for path, data in savepoint.files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return f"file://{directory}"


def stopped(
    backend: str, parallelism: int = 2, records: list[dict[str, Any]] = RECORDS
) -> tuple[Savepoint, list[dict[str, Any]]]:
    result = run_job(
        jobs.every_kind,
        parallelism=parallelism,
        sources={"numbers": records},
        stop_after_records=len(records),
        clock=ManualClock(0),
        state_backend=backend,
    )
    assert result.savepoint is not None
    return result.savepoint, records[: result.records_read]


def rows(saved: SavedState, operator: str, state: str, **options: Any) -> set[tuple[Any, ...]]:
    found = set()
    for row in saved.rows(operator, state, ReadOptions(**options)):
        found.add(tuple(tuple(v) if isinstance(v, list) else v for v in row.values()))
    return found


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_every_state_kind_reads_back_as_the_job_held_it(tmp_path: Path, backend: str) -> None:
    savepoint, read = stopped(backend)
    saved = open_snapshot(write_savepoint(savepoint, tmp_path), unsigned=True)
    expected = jobs.expected_rows(read)

    kinds = saved.operator("kinds")
    assert {name: meta.kind.value for name, meta in kinds.states.items()} == {
        "count": "value",
        "seen": "list",
        "parities": "map",
        "total": "reducing",
        "mean": "aggregating",
        "last": "value",
        "_timers.event_time": "timers",
        "_timers.processing_time": "timers",
    }
    assert kinds.states["last"].ttl
    assert not kinds.states["count"].ttl
    assert kinds.max_parallelism == 128
    assert kinds.parallelism == 2
    assert [s.key_groups for s in kinds.subtasks] == [range(0, 64), range(64, 128)]

    for state in ("count", "seen", "parities", "total"):
        assert rows(saved, "kinds", state) == expected[state], state
    assert rows(saved, "kinds", "mean") == expected["mean"]
    # TTL: the expiry comes with the value; what expired by now_ms is left out.
    last = list(saved.rows("kinds", "last", ReadOptions(now_ms=0)))
    assert {(r["key"], r["value"]) for r in last} == expected["last"]
    assert {r["expires_at_ms"] for r in last} == {365 * 24 * 3600 * 1000}
    assert list(saved.rows("kinds", "last", ReadOptions(now_ms=365 * 24 * 3600 * 1000))) == []
    assert rows(saved, "kinds", "_timers.event_time") == expected["event"]
    assert rows(saved, "kinds", "_timers.processing_time") == expected["processing"]
    whole = {r["key"]: r["values"] for r in saved.rows("kinds", "seen", ReadOptions(whole_lists=True))}
    assert whole == {k: [n for r in read if r["key"] == k for n in [r["n"]]] for k in whole}

    assert rows(saved, "means", "_window.windows") == expected["windows"]
    elements = {
        (r["key"], r["window_start"], r["window_end"], tuple(e["n"] for e in r["value"]))
        for r in saved.rows("elements", "_window.windows")
    }
    assert elements == expected["elements"]


def test_one_key_and_pandas(tmp_path: Path) -> None:
    savepoint, read = stopped("heap", parallelism=1)
    saved = open_snapshot(write_savepoint(savepoint, tmp_path), unsigned=True)
    assert list(saved.rows("kinds", "total", key="k1")) == [
        {"key": "k1", "value": sum(r["n"] for r in read if r["key"] == "k1")}
    ]
    assert list(saved.rows("kinds", "total", key="absent")) == []
    frame = saved.to_pandas("kinds", "parities")
    assert list(frame.columns) == ["key", "user_key", "value"]
    assert len(frame) == len(jobs.expected_rows(read)["parities"])


def test_what_is_no_snapshot_or_not_in_it_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(StateAccessError, match="is no savepoint or checkpoint"):
        open_snapshot(f"file://{tmp_path}", unsigned=True)
    with pytest.raises(StateAccessError, match="give the job's snapshot key"):
        open_snapshot(f"file://{tmp_path}")
    savepoint, _ = stopped("heap", parallelism=1)
    saved = open_snapshot(write_savepoint(savepoint, tmp_path / "sp"), unsigned=True)
    with pytest.raises(StateAccessError, match=r"no operator 'nope' \(it holds: elements, .*kinds"):
        saved.state("nope", "count")
    with pytest.raises(StateAccessError, match=r"operator 'kinds' .* has no state 'nope' \(it has: "):
        saved.state("kinds", "nope")
    assert fsspec  # fsspec URLs other than file:// are read the same way


def test_a_value_of_a_class_that_is_not_importable_is_refused_naming_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "jobs_own_types.py").write_text("class Balance:\n    amount = 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    jobs_own_types = importlib.import_module("jobs_own_types")

    key = SnapshotKey(secrets.token_bytes(32), "test")
    writer = SavepointWriter.new()
    writer.bootstrap(
        "balances",
        ["a"],
        str,
        lambda k, rs, ctx: ctx.state(ValueStateDescriptor("balance")).update(jobs_own_types.Balance()),
    )
    writer.write(f"file://{tmp_path}/sp", key)
    monkeypatch.delitem(sys.modules, "jobs_own_types")
    (tmp_path / "jobs_own_types.py").unlink()

    with pytest.raises(
        StateAccessError,
        match=r"state 'balance': a value cannot be read back \(ModuleNotFoundError: .*PYTHONPATH",
    ):
        list(open_snapshot(f"file://{tmp_path}/sp", key).rows("balances", "balance"))


def test_one_key_is_read_by_its_type_too(tmp_path: Path) -> None:
    """1, 1.0 and True are three keys (as the job's key_by has them), all in one key
    group here: reading one returns its row alone."""
    key = SnapshotKey(secrets.token_bytes(32), "test")
    writer = SavepointWriter.new(max_parallelism=1)
    keys: list[Any] = [1, 1.0, True, "1"]
    writer.bootstrap(
        "totals",
        keys,
        lambda k: k,
        lambda k, rs, ctx: ctx.state(ValueStateDescriptor("total")).update(repr(k)),
    )
    writer.write(f"file://{tmp_path}/sp", key)
    saved = open_snapshot(f"file://{tmp_path}/sp", key)
    for wanted in keys:
        assert [r["value"] for r in saved.rows("totals", "total", key=wanted)] == [repr(wanted)]
