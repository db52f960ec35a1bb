"""Jobs the tests of `lockgate.testing` run, importable as `tests.testing.jobs:...`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    RuntimeContext,
    StreamEnvironment,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)

from tests.jobs.functions import RunningSum


def running_sum(env: StreamEnvironment) -> None:
    """Numbers from a generator (replaced by the tests' records) to a keyed running sum."""
    (
        env.source(GeneratorSource(int(env.args.get("count", "10"))), name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink("file:///not/written"), name="out")
    )


def two_sources(env: StreamEnvironment) -> None:
    """Two generated sources, neither replaced: each read to its end."""
    evens = env.source(GeneratorSource(6, record_fn=lambda n: 2 * n), name="evens")
    odds = env.source(GeneratorSource(4, record_fn=lambda n: 2 * n + 1), name="odds")
    evens.sink(FileSink("file:///not/written"), name="even-out")
    odds.map(lambda n: n * 10).sink(FileSink("file:///not/written"), name="odd-out")


class Expiring(KeyedProcessFunction):
    """Counts a key's records in state that expires 1 s after it was written, and
    sets a processing-time timer 500 ms ahead that says when it fired."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.state(ValueStateDescriptor("seen", default=0, ttl=1.0))

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        self.seen.update(self.seen.value() + 1)
        ctx.timers.register_processing_time_timer(ctx.timers.current_processing_time() + 500)
        yield ("seen", value["key"], self.seen.value(), ctx.timers.current_processing_time())

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[Any]:
        yield ("timer", ctx.current_key, timestamp)


def expiring(env: StreamEnvironment) -> None:
    (
        env.source(GeneratorSource(0), name="in")
        .key_by(lambda record: record["key"])
        .process(Expiring(), name="seen")
        .sink(FileSink("file:///not/written"), name="out")
    )


def failing(env: StreamEnvironment) -> None:
    def divide(record: Any) -> Any:
        return 10 // record["n"]

    env.source(GeneratorSource(0), name="in").map(divide, name="divide").sink(
        FileSink("file:///not/written"), name="out"
    )


def _counted_per_minute(env: StreamEnvironment, source: str, window: str, sink: str) -> None:
    """`source`'s clicks `{"user": ..., "ts": ms}` counted per user and minute of
    event time, `(user, minute start, count)`, with `--arg lateness=<seconds>`."""
    windowed = (
        env.source(
            GeneratorSource(0),
            name=source,
            # An out-of-orderness of an hour: a source that is not given marks would
            # not make a record late in these tests.
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                timedelta(hours=1)
            ).with_timestamp_assigner(lambda click: click["ts"]),
        )
        .map(lambda click: (click["user"], 1))
        .key_by(lambda counted: counted[0])
        .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .allowed_lateness(timedelta(seconds=int(env.args.get("lateness", "0"))))
    )
    windowed.reduce(
        lambda a, b: (a[0], a[1] + b[1]),
        window_function=lambda user, window, counted: (user, window.start, counted[1]),
        name=window,
    ).sink(FileSink("file:///not/written"), name=sink)


def clicks_per_minute(env: StreamEnvironment) -> None:
    _counted_per_minute(env, "clicks", "per-minute", "out")


def clicks_and_views_per_minute(env: StreamEnvironment) -> None:
    """Two sources, each counted in windows of its own."""
    _counted_per_minute(env, "clicks", "per-minute", "out")
    _counted_per_minute(env, "views", "views-per-minute", "views-out")


def numbers_without_event_time(env: StreamEnvironment) -> None:
    env.source(GeneratorSource(0), name="numbers").sink(FileSink("file:///not/written"), name="out")
