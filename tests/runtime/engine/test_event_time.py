"""Event time through the engine: timestamps from the source's assigner, watermarks
per partition and the least over them, through exchanges to keyed functions whose
event-time timers fire when the watermark passes; the end of bounded input fires
everything before the final checkpoint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import FileSink, LogSource, StreamEnvironment, WatermarkStrategy, read_committed
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.alignment import InputGate
from lockgate.runtime.engine.channels import LocalChannel
from lockgate.runtime.engine.events import EndOfStream, Idle, TimestampedBatch, Watermark
from lockgate.runtime.engine.source_watermarks import SourceWatermarks, TimestampError

from tests.jobs.functions import SessionsByTimers
from tests.jobs.sessions import DISORDER, GAP, write_sessions
from tests.runtime.engine.harness import Run, run_job


def _sessions_job(tmp_path: Path) -> StreamEnvironment:
    env = StreamEnvironment("sessions")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=DISORDER))
    (
        env.source(
            LogSource(f"file://{tmp_path}/events"),
            name="events",
            watermarks=strategy.with_timestamp_assigner(lambda r: r["ts"]),
        )
        .key_by(lambda r: r["user"])
        .process(SessionsByTimers(GAP), name="sessions")
        .sink(FileSink(f"file://{tmp_path}/out"), name="out")
    )
    return env


@pytest.mark.parametrize(("parallelism", "backend"), [(1, "heap"), (2, "rocksdb"), (3, "heap")])
async def test_event_time_timers_give_exactly_the_sessions_of_out_of_order_input(
    tmp_path: Path, parallelism: int, backend: Any
) -> None:
    expected = write_sessions(tmp_path / "events", users=60, partitions=4, seed=parallelism)
    env = _sessions_job(tmp_path)
    run = Run(parallelism, backend, batch_size=16)
    await run_job(InMemoryStore(), JobKeys("test", "sessions"), tmp_path, env.graph(), run)

    output = read_committed(f"file://{tmp_path}/out")
    got = [(r["user"], r["start"], r["end"], r["count"]) for r in output]
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected


def test_a_watermark_strategy_without_a_timestamp_assigner_is_refused_naming_the_source() -> None:
    env = StreamEnvironment("no-assigner")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=1))
    with pytest.raises(JobDefinitionError, match=r"source .events.*with_timestamp_assigner"):
        env.source(LogSource("file:///tmp/x"), name="events", watermarks=strategy)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: WatermarkStrategy.for_bounded_out_of_orderness(5), "takes a datetime.timedelta, got int 5"),  # type: ignore[arg-type]
        (lambda: WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=-1)), "zero or more"),
        (lambda: WatermarkStrategy.for_monotonous_timestamps().with_idleness(timedelta(0)), "positive"),
        (
            lambda: WatermarkStrategy.for_monotonous_timestamps().with_watermark_interval(0.2),
            "watermark interval takes a datetime.timedelta, got float 0.2",
        ),  # type: ignore[arg-type]
        (
            lambda: WatermarkStrategy.for_monotonous_timestamps().with_watermark_interval(timedelta(-1)),
            "watermark interval must be zero or more",
        ),
        (
            lambda: WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts"),
            "needs a function",
        ),  # type: ignore[arg-type]
    ],
)
def test_a_strategy_built_wrong_is_refused_saying_what(make: Any, message: str) -> None:
    with pytest.raises(JobDefinitionError, match=message):
        make()


# -- the source's watermarks ----------------------------------------------------------


class Now:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def _strategy(idleness_s: float | None = None, interval_ms: int = 0) -> WatermarkStrategy:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=100))
    strategy = strategy.with_timestamp_assigner(lambda r: r)
    strategy = strategy.with_watermark_interval(timedelta(milliseconds=interval_ms))
    return strategy if idleness_s is None else strategy.with_idleness(timedelta(seconds=idleness_s))


def test_the_watermark_goes_on_at_most_once_per_interval_and_then_the_newest() -> None:
    """Each watermark flushes the batches under way downstream: one per batch read
    would send them half empty."""
    now = Now()
    watermarks = SourceWatermarks("events", _strategy(interval_ms=200), now)
    watermarks.timestamps("a", [1_000])
    assert watermarks.next_marks(["a"]) == [Watermark(1_000 - 101)]
    watermarks.timestamps("a", [2_000])
    now.ms = 199
    assert watermarks.next_marks(["a"]) == [], "within the interval"
    watermarks.timestamps("a", [3_000])
    now.ms = 200
    assert watermarks.next_marks(["a"]) == [Watermark(3_000 - 101)], "the newest, not each in turn"


def test_a_subtasks_watermark_is_the_least_of_its_partitions_and_never_falls() -> None:
    watermarks = SourceWatermarks("events", _strategy(), Now())
    assert watermarks.timestamps("a", [1_000, 900, 1_200]) == [1_000, 900, 1_200]
    assert watermarks.next_marks(["a", "b"]) == [], "b has read nothing: its old records may still come"
    watermarks.timestamps("b", [500])
    assert watermarks.next_marks(["a", "b"]) == [Watermark(500 - 100 - 1)]
    watermarks.timestamps("b", [2_000])
    assert watermarks.next_marks(["a", "b"]) == [Watermark(1_200 - 100 - 1)]
    watermarks.timestamps("a", [1_100])  # out of order, within the bound
    assert watermarks.next_marks(["a", "b"]) == []


def test_an_idle_partition_stops_holding_the_watermark_back_after_the_timeout() -> None:
    now = Now()
    watermarks = SourceWatermarks("events", _strategy(idleness_s=30), now)
    now.ms = 20_000
    watermarks.timestamps("a", [10_000])
    now.ms = 29_999
    assert watermarks.next_marks(["a", "silent"]) == [], "silent has read nothing for less than 30 s"
    now.ms = 30_000
    assert watermarks.next_marks(["a", "silent"]) == [Watermark(10_000 - 101)]
    now.ms = 50_000  # a has been quiet for 30 s too: the whole subtask is idle, said once
    assert watermarks.next_marks(["a", "silent"]) == [Idle()]
    assert watermarks.next_marks(["a", "silent"]) == []
    watermarks.timestamps("silent", [20_000])
    assert watermarks.next_marks(["a", "silent"]) == [Watermark(20_000 - 101)], "active again"


def test_partitions_idle_at_once_first_let_the_highest_watermark_through() -> None:
    """Everything read, then quiet: no partition holds the watermark back any more,
    so what was read fires before the subtask goes idle."""
    now = Now()
    watermarks = SourceWatermarks("events", _strategy(idleness_s=1), now)
    watermarks.timestamps("a", [59_000])
    assert watermarks.next_marks(["a", "empty"]) == [], "empty may still have old records"
    now.ms = 1_000  # both idle at the same moment
    assert watermarks.next_marks(["a", "empty"]) == [Watermark(59_000 - 101), Idle()]


@pytest.mark.parametrize("bad", ["1000", 1.5, None, True])
def test_a_timestamp_that_is_not_an_int_fails_naming_the_source_partition_and_record(bad: Any) -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"])
    watermarks = SourceWatermarks("events", strategy, Now())
    with pytest.raises(TimestampError, match=r"source 'events', partition part-3.jsonl: .* for \{'ts'"):
        watermarks.timestamps("part-3.jsonl", [{"ts": bad}])


# -- the gate's watermark ----------------------------------------------------------------


def _gate(channels: int) -> tuple[InputGate, list[LocalChannel]]:
    inputs = [LocalChannel(64) for _ in range(channels)]
    return InputGate(inputs), inputs


def _drain(gate: InputGate) -> list[object]:
    out = []
    while (item := gate.poll()) is not None:
        out.append(item)
    return out


def test_a_gate_passes_on_the_least_watermark_of_its_channels_when_it_rises() -> None:
    gate, (a, b) = _gate(2)
    a.send(Watermark(100))
    assert _drain(gate) == [], "b has said nothing yet"
    b.send(TimestampedBatch([("k", 1)], [50]))
    b.send(Watermark(80))
    assert _drain(gate) == [TimestampedBatch([("k", 1)], [50]), Watermark(80)]
    b.send(Watermark(300))
    a.send(Watermark(90))  # a channel's watermark never goes back
    assert _drain(gate) == [Watermark(100)]
    a.send(EndOfStream())
    assert _drain(gate) == [Watermark(300)], "an ended channel holds nothing back"


def test_a_gate_skips_idle_channels_and_passes_idleness_on_when_all_are() -> None:
    gate, (a, b) = _gate(2)
    a.send(Watermark(100))
    b.send(Idle())
    assert _drain(gate) == [Watermark(100)]
    a.send(Idle())
    assert _drain(gate) == [Idle()]
    b.send(Watermark(50))  # active again, behind: the gate's watermark does not fall
    assert _drain(gate) == []
    b.send(Watermark(150))
    a.send(Watermark(400))
    assert _drain(gate) == [Watermark(150)]


def test_when_the_last_active_channel_goes_idle_the_highest_watermark_goes_first() -> None:
    gate, (a, b) = _gate(2)
    a.send(Watermark(100))
    b.send(Watermark(50))
    assert _drain(gate) == [Watermark(50)]
    a.send(Idle())
    assert _drain(gate) == []
    b.send(Idle())
    assert _drain(gate) == [Watermark(100), Idle()]


def test_a_partition_that_holds_the_watermark_back_without_idleness_is_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without an idleness timeout an empty partition holds event time back for good and
    windows downstream wait; once that was silent, now a warning names the partition and
    `with_idleness` after the stall interval, once per stall."""
    clock = ManualClock()
    watermarks = SourceWatermarks("events", _strategy(), clock.monotonic_ms, stall_warning_ms=30_000)
    for _ in range(3):
        watermarks.timestamps("busy", [clock.monotonic_ms()])
        assert watermarks.next_marks(["busy", "empty"]) == []
        clock.advance(10_000)
    assert "empty" not in caplog.text, "silent for less than the stall interval"
    watermarks.timestamps("busy", [clock.monotonic_ms()])
    watermarks.next_marks(["busy", "empty"])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert (
        "source 'events': partition empty has read nothing for 30 s and holds the watermark back"
        in (warnings[0])
    )
    assert ".with_idleness(timedelta(seconds=...))" in warnings[0]
    clock.advance(10_000)
    watermarks.timestamps("busy", [clock.monotonic_ms()])
    watermarks.next_marks(["busy", "empty"])
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1, "once per stall"


def test_no_stall_is_warned_of_where_idleness_is_set_or_no_partition_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    idle_aware = SourceWatermarks("events", _strategy(idleness_s=60), clock.monotonic_ms, stall_warning_ms=1)
    all_quiet = SourceWatermarks("events", _strategy(), clock.monotonic_ms, stall_warning_ms=1)
    idle_aware.timestamps("busy", [0])
    clock.advance(10_000)
    idle_aware.timestamps("busy", [10_000])
    idle_aware.next_marks(["busy", "empty"])
    all_quiet.next_marks(["a", "b"])
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
