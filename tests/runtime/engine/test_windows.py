"""Windows: assigners, the window operator on its own (firing, lateness, merging,
the late-record count) and whole jobs whose output is the plain-Python reference —
including a stop with a savepoint at P=2 and a resume at P=3 mid-stream."""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import (
    EventTimeSessionWindows,
    FileSink,
    LogSource,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    StreamEnvironment,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
    read_committed,
)
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.api.windows import WindowSpec
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.events import KeyedRecord, keyed_record
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.operators import ProcessOperator
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.engine.window_operator import LateRecords, MissingEventTimeError, WindowProcess
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.conftest import make_backend
from tests.jobs.sessions import Count, sessions_job, write_sessions
from tests.polling import eventually_true
from tests.runtime.engine.harness import Run, run_job
from tests.runtime.engine.test_timers import Collected

MINUTE = 60_000


# -- assigners ------------------------------------------------------------------------


def test_tumbling_windows_start_at_multiples_of_the_size_plus_the_offset() -> None:
    windows = TumblingEventTimeWindows.of(timedelta(minutes=1))
    assert windows.assign(0) == [TimeWindow(0, MINUTE)]
    assert windows.assign(MINUTE - 1) == [TimeWindow(0, MINUTE)]
    assert windows.assign(-1) == [TimeWindow(-MINUTE, 0)], "before the epoch too"
    shifted = TumblingEventTimeWindows.of(timedelta(minutes=1), offset=timedelta(seconds=15))
    assert shifted.assign(10_000) == [TimeWindow(15_000 - MINUTE, 15_000)]
    assert TimeWindow(0, MINUTE).max_timestamp == MINUTE - 1


def test_sliding_windows_give_each_record_size_over_slide_windows() -> None:
    windows = SlidingEventTimeWindows.of(timedelta(minutes=10), timedelta(minutes=1))
    assigned = windows.assign(5 * MINUTE + 30_000)
    assert len(assigned) == 10
    assert all(w.start <= 5 * MINUTE + 30_000 < w.end and w.end - w.start == 10 * MINUTE for w in assigned)
    with pytest.raises(JobDefinitionError, match=r"slide .* longer than the size"):
        SlidingEventTimeWindows.of(timedelta(minutes=1), timedelta(minutes=2))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingEventTimeWindows.of(60), "takes a datetime.timedelta, got int 60"),
        (lambda: TumblingEventTimeWindows.of(timedelta(0)), "must be positive"),
        (lambda: EventTimeSessionWindows.with_gap(timedelta(seconds=-1)), "must be positive"),
    ],
)
def test_a_window_size_of_the_wrong_type_or_sign_is_refused(make: Any, message: str) -> None:
    with pytest.raises(JobDefinitionError, match=message):
        make()


class MergingCount(Count):
    def merge(self, a: int, b: int) -> int:
        return a + b


def test_session_windows_refuse_an_aggregate_that_cannot_merge() -> None:
    env = StreamEnvironment("sessions")
    keyed = env.source(LogSource("file:///tmp/none"), name="in").key_by(lambda r: r)
    with pytest.raises(
        JobDefinitionError, match="window 'counts': session windows merge, so Count must implement merge"
    ):
        keyed.window(EventTimeSessionWindows.with_gap(timedelta(seconds=1))).aggregate(Count(), name="counts")


# -- the operator on its own ---------------------------------------------------------------


class Everything(ProcessWindowFunction):
    def process(self, key: Any, window: TimeWindow, elements: list[Any], ctx: Any) -> Iterator[Any]:
        yield (key, window.start, window.end, sorted(elements))


def _keyed(pairs: list[tuple[Any, Any]]) -> list[KeyedRecord]:
    """(key, value) pairs as the keyed exchange hands them to the operator."""
    return [keyed_record(key, value, 16) for key, value in pairs]


def _window_operator(
    tmp_path: Path, spec: WindowSpec, clock: ManualClock | None = None
) -> tuple[ProcessOperator, Collected, LateRecords]:
    backend = make_backend("rocksdb", 16, range(16), tmp_path, clock)
    late = LateRecords()
    out = Collected()
    operator = ProcessOperator(
        "w",
        WindowProcess("w", spec, late),
        backend=backend,
        context=(0, 1),
        out=out,
        snapshot=lambda *_: None,
    )
    return operator, out, late


def test_a_late_record_is_dropped_and_counted_and_within_the_lateness_refires_its_window(
    tmp_path: Path,
) -> None:
    tumbling = TumblingEventTimeWindows.of(timedelta(seconds=10))
    spec = WindowSpec(tumbling, allowed_lateness_ms=5_000, function=Everything())
    operator, out, late = _window_operator(tmp_path, spec)
    operator.push(_keyed([("a", 1), ("a", 2), ("b", 3)]), [1_000, 9_999, 5_000])
    operator.advance_watermark(9_998)
    assert out.records == []
    operator.advance_watermark(9_999)
    assert sorted(out.records) == [("a", 0, 10_000, [1, 2]), ("b", 0, 10_000, [3])]
    assert out.timestamps == [9_999, 9_999], "a window's result carries its last millisecond"
    operator.push(_keyed([("a", 4)]), [2_000])  # late, but within the allowed lateness: fires again
    assert out.records[-1] == ("a", 0, 10_000, [1, 2, 4])
    operator.advance_watermark(14_999)  # end - 1 + lateness: the window is gone
    operator.push(_keyed([("a", 5)]), [3_000])
    assert late.count == 1, "dropped and counted"
    assert len(out.records) == 3


def test_session_windows_merge_when_a_record_bridges_them(tmp_path: Path) -> None:
    sessions = EventTimeSessionWindows.with_gap(timedelta(seconds=5))
    operator, out, _ = _window_operator(tmp_path, WindowSpec(sessions, aggregate=MergingCount()))
    operator.push(_keyed([("a", "x"), ("a", "y")]), [0, 8_000])  # two sessions: [0, 5000), [8000, 13000)
    operator.push(_keyed([("a", "bridge")]), [4_000])  # [4000, 9000) touches both
    operator.advance_watermark(12_999)
    assert out.records == [3], "one session of three records"
    assert out.timestamps == [12_999]


def test_a_record_exactly_the_gap_after_the_last_joins_its_session(tmp_path: Path) -> None:
    sessions = EventTimeSessionWindows.with_gap(timedelta(seconds=5))
    operator, out, _ = _window_operator(tmp_path, WindowSpec(sessions, aggregate=MergingCount()))
    operator.push(_keyed([("a", "x"), ("a", "at the gap"), ("a", "past it")]), [0, 5_000, 10_001])
    operator.advance_watermark(20_000)
    assert out.records == [2, 1], "[0, 10000) holds two (Flink's inclusive rule); 10001 starts anew"


def test_merged_session_windows_keep_every_element_of_the_windows_they_merge(tmp_path: Path) -> None:
    sessions = EventTimeSessionWindows.with_gap(timedelta(seconds=5))
    operator, out, _ = _window_operator(tmp_path, WindowSpec(sessions, function=Everything()))
    operator.push(_keyed([("a", 1), ("a", 2), ("a", 3)]), [0, 1_000, 8_000])
    operator.push(_keyed([("a", 4)]), [4_000])
    operator.advance_watermark(20_000)
    assert out.records == [("a", 0, 13_000, [1, 2, 3, 4])]


def test_a_record_without_event_time_in_event_time_windows_names_the_fix(tmp_path: Path) -> None:
    spec = WindowSpec(TumblingEventTimeWindows.of(timedelta(seconds=1)), aggregate=Count())
    operator, _, _ = _window_operator(tmp_path, spec)
    with pytest.raises(MissingEventTimeError, match=r"w: a record without event time.*watermarks="):
        operator.push(_keyed([("a", 1)]))


def test_processing_time_windows_fire_on_the_clock(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    spec = WindowSpec(TumblingProcessingTimeWindows.of(timedelta(seconds=1)), aggregate=Count())
    operator, out, _ = _window_operator(tmp_path, spec, clock)
    operator.push(_keyed([("a", 1), ("a", 2)]))
    clock.advance(998)
    operator.flush()
    assert out.records == []
    clock.advance(1)
    operator.flush()
    assert out.records == [2]


# -- whole jobs ------------------------------------------------------------------------------


def _sessions(output: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["user"], r["start"], r["end"], r["count"]) for r in output]


@pytest.mark.parametrize(("parallelism", "backend"), [(1, "heap"), (2, "rocksdb"), (3, "heap")])
async def test_session_windows_of_out_of_order_input_are_exactly_the_reference(
    tmp_path: Path, parallelism: int, backend: Any
) -> None:
    expected = write_sessions(tmp_path / "events", users=60, partitions=4, seed=10 + parallelism)
    env = StreamEnvironment(
        "sessions", {"input": f"file://{tmp_path}/events", "output": f"file://{tmp_path}/out"}
    )
    sessions_job(env)
    await run_job(
        InMemoryStore(), JobKeys("test", "sessions"), tmp_path, env.graph(), Run(parallelism, backend)
    )
    got = _sessions(read_committed(f"file://{tmp_path}/out"))
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected


def _write_events(directory: Path, partitions: int, count: int) -> list[dict[str, Any]]:
    directory.mkdir(parents=True)
    events = [{"user": n % 7, "ts": n * 997 % 600_000} for n in range(count)]
    for p in range(partitions):
        with open(directory / f"part-{p}.jsonl", "w") as f:
            mine = sorted((e for i, e in enumerate(events) if i % partitions == p), key=lambda e: e["ts"])
            f.writelines(json.dumps(e) + "\n" for e in mine)
    return events


async def test_tumbling_counts_and_sliding_maxima_are_exactly_the_reference(tmp_path: Path) -> None:
    events = _write_events(tmp_path / "events", partitions=3, count=3_000)
    env = StreamEnvironment("windows")
    keyed = env.source(
        LogSource(f"file://{tmp_path}/events"),
        name="events",
        watermarks=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"]),
    ).key_by(lambda r: r["user"])
    keyed.window(TumblingEventTimeWindows.of(timedelta(minutes=1))).aggregate(
        Count(),
        window_function=lambda key, window, n: {"user": key, "start": window.start, "n": n},
        name="per-minute",
    ).sink(FileSink(f"file://{tmp_path}/counts"), name="counts")
    keyed.window(SlidingEventTimeWindows.of(timedelta(minutes=2), timedelta(minutes=1))).reduce(
        lambda a, b: a if a["ts"] >= b["ts"] else b,
        window_function=lambda key, window, r: {"user": key, "start": window.start, "ts": r["ts"]},
        name="latest",
    ).sink(FileSink(f"file://{tmp_path}/latest"), name="latest-out")
    await run_job(InMemoryStore(), JobKeys("test", "windows"), tmp_path, env.graph(), Run(2, "rocksdb"))

    counts = Counter((e["user"], e["ts"] // MINUTE * MINUTE) for e in events)
    got = {(r["user"], r["start"]): r["n"] for r in read_committed(f"file://{tmp_path}/counts")}
    assert got == counts
    latest: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    for e in events:
        for start in (e["ts"] // MINUTE * MINUTE, e["ts"] // MINUTE * MINUTE - MINUTE):
            latest[(e["user"], start)] = max(latest[(e["user"], start)], e["ts"])
    got_latest = {(r["user"], r["start"]): r["ts"] for r in read_committed(f"file://{tmp_path}/latest")}
    assert got_latest == dict(latest)


def _spec(tmp_path: Path, store: InMemoryStore, parallelism: int, delay_s: str) -> JobSpec:
    args = {"input": f"file://{tmp_path}/events", "output": f"file://{tmp_path}/out", "delay_s": delay_s}
    return JobSpec(
        "tests.jobs.sessions:sessions_job",
        JobKeys("test", "rescaled-sessions"),
        parallelism,
        StateConfig("rocksdb", tmp_path / f"local-{parallelism}", 32),
        store,
        secret=b"s" * 32,
        args=tuple(args.items()),
        bounded=True,
        batch_size=8,
    )


async def test_sessions_stopped_with_a_savepoint_at_2_resume_at_3_with_nothing_lost_or_twice(
    tmp_path: Path,
) -> None:
    expected = write_sessions(tmp_path / "events", users=80, partitions=4, seed=99)
    store = InMemoryStore()
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.05, timeout_s=30)
    slow = _spec(tmp_path, store, 2, "0.002")
    first = JobMaster(slow, ThreadStage(), storage, config, savepoint_dir=f"file://{tmp_path}/sp")
    run = asyncio.create_task(first.run(restart_strategy("none")))
    keys = JobKeys("test", "rescaled-sessions")

    async def checkpointed() -> bool:
        return await store.get(keys.latest) is not None

    await eventually_true(checkpointed, "a checkpoint completed: the job is mid-stream", 60)
    request = await request_savepoint(store, keys, stop=True, expires_in_s=60)
    savepoint = await await_savepoint(store, keys, request, 60)
    stopped = await asyncio.wait_for(run, 60)
    assert savepoint.status == "completed"
    assert stopped.savepoint == savepoint.path
    before = _sessions(read_committed(f"file://{tmp_path}/out"))
    assert set(before) < expected, "stopped mid-stream: some sessions are still to come"

    second = JobMaster(_spec(tmp_path, store, 3, "0"), ThreadStage(), storage, config)
    await asyncio.wait_for(second.run(restart_strategy("none"), from_savepoint=savepoint.path), 120)
    got = _sessions(read_committed(f"file://{tmp_path}/out"))
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected
