"""The job of the Kafka benchmark: the keyed running count from one topic to
another, exactly once. Input records are JSON `{"key", "n", "t"}` (`t`: when the
record was produced, epoch seconds); the output `{"key", "count", "sum", "n", "t"}`,
keyed by the key, so a consumer of the output can tell each record's end-to-end
latency. The sink's writes are timed as the engine benchmark's are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine_job import MeasuringSink
from lockgate.runtime import (
    Context,
    KafkaSink,
    KafkaSource,
    KeyedProcessFunction,
    RuntimeContext,
    StreamEnvironment,
    ValueStateDescriptor,
)

QUIET = {"log_level": 3}


class RunningCount(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.state = ctx.state(ValueStateDescriptor("count-sum", default=(0, 0)))

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        count, total = self.state.value()
        count, total = count + 1, total + value["n"]
        self.state.update((count, total))
        yield {"key": value["key"], "count": count, "sum": total, "n": value["n"], "t": value["t"]}


def build(env: StreamEnvironment) -> None:
    args = env.args
    source = KafkaSource(
        bootstrap_servers=args["bootstrap"],
        topics=[args["input"]],
        group_id="bench",
        stop_at=args.get("stop_at") or None,
        properties=QUIET,
    )
    # partitioning="subtask": on tansu 0.6.0, transactions of several writers on one
    # partition can wedge it for good (tests/test_kafka_broker.py, docs/operations.md).
    sink = KafkaSink(
        bootstrap_servers=args["bootstrap"],
        topic=args["output"],
        key=lambda r: str(r["key"]),
        partitioning="subtask",
        properties=QUIET,
    )
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningCount(), name="count")
        .sink(MeasuringSink(sink, args["samples"]), name="out")
    )
