"""Jobs of the adversarial review of unaligned checkpoints (issue 40), configured by
their args as `tests.jobs.configurable`'s are."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    AggregateFunction,
    FileSink,
    GeneratorSource,
    LogSource,
    StreamEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

from tests.jobs import counting
from tests.jobs.functions import CountThrough, SlowIdentity, SlowRunningSum


def slow_keyed_map(env: StreamEnvironment) -> None:
    """A source, a key_by and then a slow map (not a keyed operator: it takes the records
    themselves, partitioned by key) into a sink; the map's input stays full."""
    source = counting.unthrottled_numbers(env)
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .map(SlowIdentity(float(env.args["slow_ms"]) / 1000), name="slow")
        .sink(FileSink(env.args["output"]), name="out")
    )


def slow_keyed_sink(env: StreamEnvironment) -> None:
    """A source and a key_by straight into a slow sink (a sink after a key_by takes the
    records themselves, partitioned by key); the sink's input stays full. In-process
    only: the sink counts into `InFlight.registry[tracker]`."""
    source = counting.unthrottled_numbers(env)
    sink = counting.SlowSink(env.args["output"], env.args["tracker"], float(env.args["slow_ms"]) / 1000)
    env.source(source, name="numbers").key_by(lambda record: record["key"]).sink(sink, name="out")


def failing_two_exchanges(env: StreamEnvironment) -> None:
    """source -> map (fails once, as `failing_running_sum`) -> key_by -> a slow running sum
    -> key_by (another key) -> a counting pass-through -> sink: two keyed exchanges in a row."""
    output = env.args["output"]
    fail = counting.FailOnce(
        int(env.args["fail_at"]),
        env.args["flag"],
        committed_dir=output.removeprefix("file://"),
        checkpoints=int(env.args.get("checkpoints", "1")),
    )
    source = GeneratorSource(int(env.args["count"]), keys=int(env.args["keys"]), partitions=4)
    (
        env.source(source, name="numbers")
        .map(fail, name="chaos")
        .key_by(lambda record: record["key"])
        .process(SlowRunningSum(float(env.args["slow_ms"]) / 1000), name="sum")
        .key_by(lambda record: record["n"] % 7)
        .process(CountThrough(), name="through")
        .sink(FileSink(output), name="out")
    )


class SlowCount(AggregateFunction[Any, int, int]):
    """Counts, taking `seconds` per record: a slow window operator (its input stays full)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        time.sleep(self.seconds)
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


def slow_window_counts(env: StreamEnvironment) -> None:
    """Records per user per minute of event time, from a log whose partitions are each
    in time order, counted by a slow tumbling-window aggregate."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"])
    (
        env.source(LogSource(env.args["input"]), name="events", watermarks=strategy)
        .key_by(lambda r: r["user"])
        .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .aggregate(
            SlowCount(float(env.args["slow_ms"]) / 1000),
            window_function=lambda user, window, n: {"user": user, "start": window.start, "n": n},
            name="per-minute",
        )
        .sink(FileSink(env.args["output"]), name="out")
    )
