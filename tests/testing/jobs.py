"""Jobs the tests of `lockgate.testing` run, importable as `tests.testing.jobs:...`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    RuntimeContext,
    StreamEnvironment,
    ValueStateDescriptor,
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
