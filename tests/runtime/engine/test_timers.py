"""A keyed function's timers as the operator runs them: `ctx.timers`, `on_timer`,
processing time on the backend's clock, event time on the watermark, and timers
that survive a snapshot and fire, once, on whichever subtask owns their key after
a restore at another parallelism."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import (
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    StreamEnvironment,
    ValueStateDescriptor,
    key_group,
    key_group_range,
    read_committed,
)
from lockgate.runtime.api.functions import Context, RuntimeContext
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.events import NO_WATERMARK, Barrier, EventTime, KeyedRecord, keyed_record
from lockgate.runtime.engine.operators import ProcessOperator
from lockgate.runtime.engine.timer_service import TimerRegistrationError
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import KeyGroupOwnershipError

from tests.conftest import make_backend
from tests.jobs.functions import FirstSeen
from tests.runtime.engine.harness import Run, run_job
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

M = 16
SEEN = ValueStateDescriptor("seen", default=0)
_ids = itertools.count(1)


class Collected:
    """The end of a chain: what reached it, with event times and watermarks."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.timestamps: list[int | None] = []
        self.marks: list[EventTime] = []

    def push(self, records: list[Any], timestamps: list[int | None] | None = None) -> None:
        self.records.extend(records)
        self.timestamps.extend(timestamps or [None] * len(records))

    def barrier(self, barrier: Barrier) -> None:
        pass

    def event_time(self, mark: EventTime) -> None:
        self.marks.append(mark)

    def end(self) -> None:
        pass

    def flush(self) -> None:
        pass


class Expire(KeyedProcessFunction):
    """Counts a key's records; `ttl` ms of processing time after its first record,
    and at event time `at` if records carry one, says how many it saw."""

    def __init__(self, ttl: int) -> None:
        self.ttl = ttl

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.state(SEEN)

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        n = self.seen.value() + 1
        self.seen.update(n)
        if n == 1:
            ctx.timers.register_processing_time_timer(ctx.timers.current_processing_time() + self.ttl)
        if isinstance(value, dict) and "at" in value:
            ctx.timers.register_event_time_timer(value["at"])
        if isinstance(value, dict) and "cancel" in value:
            ctx.timers.delete_event_time_timer(value["cancel"])
        yield from ()

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[Any]:
        assert ctx.timestamp == timestamp
        yield (ctx.time_domain, ctx.current_key, timestamp, self.seen.value())


def _keyed(pairs: list[tuple[Any, Any]]) -> list[KeyedRecord]:
    """(key, value) pairs as the keyed exchange hands them to the operator."""
    return [keyed_record(key, value, M) for key, value in pairs]


def _operator(
    backend: CheckpointableKeyedStateBackend, out: Collected, function: KeyedProcessFunction, index: int = 0
) -> ProcessOperator:
    return ProcessOperator(
        "expire", function, backend=backend, context=(index, 1), out=out, snapshot=lambda *_: None
    )


@pytest.fixture(params=["heap", "rocksdb"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("timestamps", [None, [7]], ids=["no event time", "event time"])
def test_a_record_routed_to_a_key_group_this_subtask_does_not_own_is_refused(
    kind: str, tmp_path: Path, timestamps: list[int | None] | None
) -> None:
    backend = make_backend(kind, M, range(M // 2), tmp_path)
    out = Collected()
    operator = _operator(backend, out, Expire(ttl=500))
    foreign = next(k for k in map(str, itertools.count()) if key_group(k, M) >= M // 2)
    try:
        with pytest.raises(
            KeyGroupOwnershipError, match=f"key '{foreign}' is in key group {key_group(foreign, M)}"
        ):
            operator.push(_keyed([(foreign, 1)]), timestamps)
        assert out.records == []
        assert not backend.current.is_set, "the key was not entered"
    finally:
        backend.close()


def test_processing_time_timers_fire_on_the_clock_once_per_key_and_timestamp(
    kind: str, tmp_path: Path
) -> None:
    clock = ManualClock(1_000)
    backend = make_backend(kind, M, range(M), tmp_path, clock)
    out = Collected()
    operator = _operator(backend, out, Expire(ttl=500))
    try:
        operator.push(_keyed([("a", 1), ("b", 1), ("a", 2)]))
        clock.advance(499)
        operator.flush()
        assert out.records == [], "nothing is due before the clock reaches it"
        operator.push(_keyed([("a", 3)]))
        clock.advance(1)
        operator.flush()
        assert sorted(out.records) == [("processing_time", "a", 1_500, 3), ("processing_time", "b", 1_500, 1)]
        clock.advance(10_000)
        operator.flush()
        assert len(out.records) == 2, "each timer fires once"
    finally:
        backend.close()


def test_event_time_timers_fire_when_the_watermark_passes_them_and_deleted_ones_never(
    kind: str, tmp_path: Path
) -> None:
    backend = make_backend(kind, M, range(M), tmp_path, ManualClock(0))
    out = Collected()
    operator = _operator(backend, out, Expire(ttl=10**9))
    try:
        assert operator.timers.current_watermark() == NO_WATERMARK
        operator.push(_keyed([("a", {"at": 100}), ("b", {"at": 50}), ("a", {"at": 100}), ("c", {"at": 70})]))
        operator.push(_keyed([("c", {"cancel": 70})]))
        operator.advance_watermark(49)
        assert out.records == []
        operator.advance_watermark(100)
        assert sorted(r[:3] for r in out.records) == [("event_time", "a", 100), ("event_time", "b", 50)]
        operator.advance_watermark(80)  # a watermark never goes back: nothing fires again
        assert operator.timers.current_watermark() == 100
        assert len(out.records) == 2
    finally:
        backend.close()


class SetsWrongTimers(KeyedProcessFunction):
    def __init__(self, timestamp: Any, in_open: bool = False) -> None:
        self.timestamp = timestamp
        self.in_open = in_open

    def open(self, ctx: Any) -> None:
        if self.in_open:
            ctx.timers.register_event_time_timer(self.timestamp)

    def process(self, value: Any, ctx: Context) -> None:
        ctx.timers.register_event_time_timer(self.timestamp)


@pytest.mark.parametrize(
    ("timestamp", "message"),
    [
        (1.5, r"expire: a timer's timestamp is an int of milliseconds since the epoch, got 1.5 \(float\)"),
        ("10", r"got '10' \(str\)"),
        (True, r"got True \(bool\)"),
        (2**63, "64 signed bits"),
    ],
)
def test_a_timer_of_the_wrong_type_or_range_is_refused_naming_the_vertex(
    tmp_path: Path, timestamp: Any, message: str
) -> None:
    backend = make_backend("heap", M, range(M), tmp_path)
    operator = _operator(backend, Collected(), SetsWrongTimers(timestamp))
    with pytest.raises(TimerRegistrationError, match=message):
        operator.push(_keyed([("a", 1)]))


def test_a_timer_set_in_open_is_refused_it_has_no_key(tmp_path: Path) -> None:
    backend = make_backend("heap", M, range(M), tmp_path)
    with pytest.raises(TimerRegistrationError, match="not in open"):
        _operator(backend, Collected(), SetsWrongTimers(5, in_open=True))


@pytest.mark.parametrize(
    ("source", "target", "p1", "p2"), [("heap", "rocksdb", 2, 3), ("rocksdb", "heap", 3, 2)]
)
def test_pending_timers_fire_once_after_a_restore_at_another_parallelism(
    tmp_path: Path, source: str, target: str, p1: int, p2: int
) -> None:
    clock = ManualClock(0)
    keys = [f"user-{i}" for i in range(60)]

    def subtasks(kind: str, parallelism: int, name: str) -> list[LocalSubtask]:
        return [
            LocalSubtask(
                make_backend(kind, M, key_group_range(M, parallelism, i), tmp_path / name / str(i), clock)
            )
            for i in range(parallelism)
        ]

    def owner(subtasks: list[LocalSubtask], key: str) -> int:
        return next(i for i, s in enumerate(subtasks) if s.keyed and key_group(key, M) in s.keyed.key_groups)

    old, new = subtasks(source, p1, "old"), subtasks(target, p2, "new")
    try:
        outs = [Collected() for _ in old]
        operators = [
            _operator(s.keyed, o, Expire(ttl=1_000), i)
            for i, (s, o) in enumerate(zip(old, outs, strict=True))
        ]  # type: ignore[arg-type]
        for key in keys:
            operators[owner(old, key)].push(_keyed([(key, {"at": 5_000 + len(key)})]))
        storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
        n = next(_ids)
        directory = storage.checkpoint_dir("job", n)
        snapshot_vertex(storage, directory, ("job", n, "savepoint"), "expire", old)
        assert all(not o.records for o in outs), "no timer was due before the savepoint"

        restore_vertex(storage, directory, "expire", new)
        outs = [Collected() for _ in new]
        operators = [
            _operator(s.keyed, o, Expire(ttl=1_000), i)
            for i, (s, o) in enumerate(zip(new, outs, strict=True))
        ]  # type: ignore[arg-type]
        clock.advance(1_000)
        for operator in operators:
            operator.flush()
            operator.advance_watermark(10_000)
        fired = [(r[0], r[1]) for o in outs for r in o.records]
        assert sorted(fired) == sorted(
            [("processing_time", k) for k in keys] + [("event_time", k) for k in keys]
        )
        for index, out in enumerate(outs):
            assert all(owner(new, key) == index for _, key, _, _ in out.records), "fired by the key's owner"
    finally:
        for subtask in old + new:
            assert subtask.keyed is not None
            subtask.keyed.close()


@pytest.mark.parametrize(("parallelism", "backend"), [(1, "heap"), (3, "rocksdb")])
async def test_processing_time_timers_run_in_the_engine_and_their_output_is_committed_once(
    tmp_path: Path, parallelism: int, backend: str
) -> None:
    env = StreamEnvironment("first-seen")
    (
        env.source(GeneratorSource(3_000, keys=41, partitions=3), name="numbers")
        .key_by(lambda record: record["key"])
        .process(FirstSeen(), name="first")
        .sink(FileSink(f"file://{tmp_path}/out"), name="out")
    )
    run = Run(parallelism, backend)  # type: ignore[arg-type]
    await run_job(InMemoryStore(), JobKeys("test", "first-seen"), tmp_path, env.graph(), run)

    output = read_committed(f"file://{tmp_path}/out")
    assert sorted(r["key"] for r in output) == list(range(41)), "one timer per key fired, committed once"
    assert {r["domain"] for r in output} == {"processing_time"}
