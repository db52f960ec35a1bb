"""Writing savepoints: bootstrapped from records, or an existing savepoint with an
operator's state transformed, an operator removed, the max parallelism changed;
signed with the job's key, and restored by a job that continues exactly."""

from __future__ import annotations

import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError
from lockgate.runtime.snapshot.metadata import SnapshotNotSignedError
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import SnapshotCorruptError
from lockgate.state import StateAccessError, open_snapshot
from lockgate.state.writer import KeyContext, SavepointWriter
from lockgate.testing import Savepoint, Watermark, run_job

from tests.state import jobs
from tests.state.test_read import rows, stopped, write_savepoint
from tests.testing import jobs as testing_jobs

KEYS = 5
NUMBERS = [{"n": n, "key": n % KEYS} for n in range(200)]
TOTAL = ValueStateDescriptor("total", default=0)
KEY = SnapshotKey(secrets.token_bytes(32), "the tests' key")


def as_savepoint(directory: Path, like: Savepoint | None = None) -> Savepoint:
    """The savepoint written in `directory`, to restore with `run_job` (with what `like`
    had committed, when it was made from `like`)."""
    files = {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    return Savepoint(files, 0, frozenset() if like is None else like.committed)


def assert_sums_continue(
    outputs: list[dict[str, Any]], numbers: list[dict[str, Any]], start: dict[Any, int]
) -> None:
    """Each key's sums, in output order, are `start[key]` plus the running sum of its
    records: every record exactly once, on top of the state it was restored with."""
    assert sorted(r["n"] for r in outputs) == sorted(r["n"] for r in numbers)
    for key in {r["key"] for r in numbers}:
        sums = [r["sum"] for r in outputs if r["key"] == key]
        running, expected = start.get(key, 0), []
        for record in (r for r in numbers if r["key"] == key):
            running += record["n"]
            expected.append(running)
        assert sums == expected, key


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_job_restored_from_a_bootstrapped_savepoint_continues_from_the_bootstrapped_state(
    tmp_path: Path, backend: str
) -> None:
    table = [{"key": key, "amount": 1000 * key + part} for key in range(KEYS) for part in range(3)]

    def set_total(key: Any, records: list[dict[str, Any]], ctx: KeyContext) -> None:
        ctx.state(TOTAL).update(sum(r["amount"] for r in records))

    writer = SavepointWriter.new(max_parallelism=128, job_id="running-sum")
    writer.bootstrap("sum", table, lambda r: r["key"], set_total, parallelism=2)
    writer.write(f"file://{tmp_path}/boot", KEY)

    saved = open_snapshot(f"file://{tmp_path}/boot", KEY)
    assert list(saved.operators) == ["sum"]
    start = {key: sum(r["amount"] for r in table if r["key"] == key) for key in range(KEYS)}
    assert {(r["key"], r["value"]) for r in saved.rows("sum", "total")} == set(start.items())
    resumed = run_job(
        testing_jobs.running_sum,
        parallelism=3,
        sources={"numbers": NUMBERS},
        restore=as_savepoint(tmp_path / "boot"),
        state_backend=backend,
    )
    assert_sums_continue(resumed.outputs["out"], NUMBERS, start)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_transformed_savepoint_restores_at_another_parallelism(tmp_path: Path, backend: str) -> None:
    first = run_job(
        testing_jobs.running_sum,
        parallelism=2,
        sources={"numbers": NUMBERS},
        stop_after_records=70,
        state_backend=backend,
    )
    assert first.savepoint is not None
    write_savepoint(first.savepoint, tmp_path / "first")
    before = {
        r["key"]: r["value"]
        for r in open_snapshot(f"file://{tmp_path}/first", unsigned=True).rows("sum", "total")
    }

    def times_ten(key: Any, ctx: KeyContext) -> None:
        total = ctx.state(TOTAL)
        total.update(total.value() * 10)

    saved = open_snapshot(f"file://{tmp_path}/first", unsigned=True)
    SavepointWriter.from_snapshot(saved).transform("sum", times_ten, parallelism=3).write(
        f"file://{tmp_path}/fixed", KEY
    )

    fixed = open_snapshot(f"file://{tmp_path}/fixed", KEY)
    assert fixed.operator("sum").parallelism == 3
    assert set(fixed.operators) == {"numbers", "sum", "out"}, (
        "the source's offsets and the sink's transactions too"
    )
    rest = run_job(
        testing_jobs.running_sum,
        parallelism=3,
        sources={"numbers": NUMBERS},
        restore=as_savepoint(tmp_path / "fixed", first.savepoint),
    )
    assert_sums_continue(rest.outputs["out"], NUMBERS[70:], {k: 10 * v for k, v in before.items()})


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_max_parallelism_changed_from_128_to_256_and_the_job_resumes_exact(
    tmp_path: Path, backend: str
) -> None:
    first = run_job(
        testing_jobs.running_sum,
        parallelism=2,
        sources={"numbers": NUMBERS},
        stop_after_records=70,
        state_backend=backend,
    )
    assert first.savepoint is not None
    saved = open_snapshot(write_savepoint(first.savepoint, tmp_path / "first"), unsigned=True)
    SavepointWriter.from_snapshot(saved).with_max_parallelism(256).write(f"file://{tmp_path}/wider", KEY)

    wider = as_savepoint(tmp_path / "wider", first.savepoint)
    with pytest.raises(MaxParallelismMismatchError, match="max parallelism 256"):
        run_job(testing_jobs.running_sum, sources={"numbers": NUMBERS}, restore=wider)
    rest = run_job(
        testing_jobs.running_sum,
        parallelism=3,
        max_parallelism=256,
        sources={"numbers": NUMBERS},
        restore=wider,
        state_backend=backend,
    )
    outputs = first.outputs["out"] + rest.outputs["out"]
    assert_sums_continue(outputs, NUMBERS, {})


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_every_kind_timers_and_windows_survive_a_rewrite_at_another_max_parallelism(
    tmp_path: Path, backend: str
) -> None:
    savepoint, read = stopped(backend)
    saved = open_snapshot(write_savepoint(savepoint, tmp_path / "first"), unsigned=True)
    writer = SavepointWriter.from_snapshot(saved).with_max_parallelism(64).transform("kinds", parallelism=3)
    writer.remove_operator("elements")
    writer.bootstrap("added", ["x", "y"], str, lambda k, rs, ctx: ctx.state(TOTAL).update(len(rs)))
    writer.write(f"file://{tmp_path}/rewritten", KEY, clock=ManualClock(0))

    rewritten = open_snapshot(f"file://{tmp_path}/rewritten", KEY)
    assert "elements" not in rewritten.operators
    assert {(r["key"], r["value"]) for r in rewritten.rows("added", "total")} == {("x", 1), ("y", 1)}
    assert rewritten.operator("added").max_parallelism == 64
    assert rewritten.operator("kinds").max_parallelism == 64
    expected = jobs.expected_rows(read)
    for state in ("count", "seen", "parities", "total", "mean"):
        assert rows(rewritten, "kinds", state) == expected[state], state
    # Each key in the key group it hashes to now: read key by key (one key group each).
    keys = {r["key"] for r in read}
    for operator, state in (
        ("kinds", "parities"),
        ("kinds", "seen"),
        ("kinds", "_timers.event_time"),
        ("means", "_window.windows"),
    ):
        by_key = [tuple(row.values()) for key in keys for row in rewritten.rows(operator, state, key=key)]
        assert len(by_key) == len(list(rewritten.rows(operator, state))), (operator, state)
    assert rows(rewritten, "kinds", "last", now_ms=0) == {
        (*row, 365 * 24 * 3600 * 1000) for row in expected["last"]
    }
    assert rows(rewritten, "kinds", "_timers.event_time") == expected["event"]
    assert rows(rewritten, "kinds", "_timers.processing_time") == expected["processing"]
    assert rows(rewritten, "means", "_window.windows") == expected["windows"]


def test_tampering_and_other_keys_are_refused(tmp_path: Path) -> None:
    first = run_job(
        testing_jobs.running_sum, parallelism=2, sources={"numbers": NUMBERS}, stop_after_records=70
    )
    assert first.savepoint is not None
    saved = open_snapshot(write_savepoint(first.savepoint, tmp_path / "first"), unsigned=True)
    url = f"file://{tmp_path}/signed"
    SavepointWriter.from_snapshot(saved).write(url, KEY)
    assert open_snapshot(url, KEY).operator("sum").parallelism == 2

    other = SnapshotKey(secrets.token_bytes(32), "another job's key")
    with pytest.raises(SnapshotNotSignedError, match="not with this job's key"):
        open_snapshot(url, other)
    with pytest.raises(SnapshotNotSignedError, match="is not signed"):
        open_snapshot(f"file://{tmp_path}/first", KEY)

    keyed = tmp_path / "signed" / "sum" / "0" / "keyed"
    data = bytearray(keyed.read_bytes())
    data[10] ^= 0xFF
    keyed.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="keyed"):
        list(open_snapshot(url, KEY).rows("sum", "total"))

    metadata = tmp_path / "signed" / "_metadata"
    metadata.write_bytes(metadata.read_bytes().replace(b'"parallelism": 2', b'"parallelism": 1', 1))
    with pytest.raises(SnapshotCorruptError):
        open_snapshot(url, KEY)
    with pytest.raises(StateAccessError, match="holds a snapshot already"):
        SavepointWriter.from_snapshot(saved).write(url, KEY)
    with pytest.raises(
        StateAccessError,
        match="operator 'sum': parallelism 200 must be between 1 and the max parallelism 128",
    ):
        SavepointWriter.from_snapshot(saved).transform("sum", parallelism=200).write(
            f"file://{tmp_path}/wide", KEY
        )
    assert not (tmp_path / "wide").exists(), "refused before anything was written"
    with pytest.raises(StateAccessError, match="no operator 'nope' to transform"):
        SavepointWriter.from_snapshot(saved).transform("nope")


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_job_restored_from_a_rewritten_savepoint_fires_its_timers_and_windows_as_if_never_stopped(
    tmp_path: Path, backend: str
) -> None:
    """Every kind of state, the event-time timers and the windows' contents, rewritten
    with another max parallelism and parallelism, restored: what the job emits before
    the stop and after the restore is what one run without a stop emits."""
    records: list[Any] = [*jobs.records(60), Watermark(10 * jobs.TIMER_AHEAD_MS)]
    sinks = ("out", "mean-out", "elements-out")
    whole = run_job(jobs.every_kind, parallelism=2, sources={"numbers": records}, clock=ManualClock(0))
    assert whole.outputs["mean-out"], "the final watermark fires every window"
    assert any(r[0] == "timer" for r in whole.outputs["out"]), "and every event-time timer"
    first = run_job(
        jobs.every_kind,
        parallelism=2,
        sources={"numbers": records},
        stop_after_records=25,
        clock=ManualClock(0),
        state_backend=backend,
    )
    assert first.savepoint is not None
    saved = open_snapshot(write_savepoint(first.savepoint, tmp_path / "first"), unsigned=True)
    writer = SavepointWriter.from_snapshot(saved).with_max_parallelism(256)
    writer.transform("kinds", parallelism=3).transform("means", parallelism=1)
    writer.write(f"file://{tmp_path}/rewritten", KEY)

    rest = run_job(
        jobs.every_kind,
        parallelism=3,
        max_parallelism=256,
        sources={"numbers": records},
        restore=as_savepoint(tmp_path / "rewritten", first.savepoint),
        clock=ManualClock(0),
        state_backend=backend,
    )
    for sink in sinks:
        resumed = first.outputs[sink] + rest.outputs[sink]
        assert Counter(map(repr, resumed)) == Counter(map(repr, whole.outputs[sink])), sink
