"""The job the engine benchmark runs: a keyed running sum over generated records,
each stamped at the source so the sink can measure how long it took to arrive."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    ForwardingSinkWriter,
    GeneratorSource,
    JobIdentity,
    KeyedProcessFunction,
    RuntimeContext,
    Sink,
    SinkWriter,
    StreamEnvironment,
    SubtaskContext,
    ValueStateDescriptor,
)

SAMPLE_EVERY = 50


class Sum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.state(ValueStateDescriptor("total", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        total = self.total.value() + value["n"]
        self.total.update(total)
        yield {"key": value["key"], "sum": total, "t": value["t"]}


def stamp(record: dict[str, Any]) -> dict[str, Any]:
    record["t"] = time.time()
    return record


class _MeasuringWriter(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, samples: str, subtask: int) -> None:
        super().__init__(inner)
        self.path = os.path.join(samples, f"subtask-{subtask}-{os.getpid()}.json")
        self.latencies: list[float] = []
        self.count = 0
        self.first = self.last = self.first_write = 0.0

    def write(self, record: Any) -> None:
        now = time.time()
        if self.count == 0:
            self.first, self.first_write = record["t"], now
        self.count += 1
        self.last = now
        if self.count % SAMPLE_EVERY == 0:
            self.latencies.append(now - record["t"])
        self.inner.write(record)

    def close(self) -> None:
        self.inner.close()
        with open(self.path, "w") as out:
            json.dump(
                {
                    "count": self.count,
                    "first": self.first,
                    "first_write": self.first_write,
                    "last": self.last,
                    "latencies": self.latencies,
                },
                out,
            )


class MeasuringSink(Sink):
    """`inner`, with every write timed: each subtask's count, first and last write,
    and a sample of source-to-sink latencies go to a file in `samples` at close."""

    def __init__(self, inner: Sink, samples: str) -> None:
        self.inner = inner
        self.samples = samples

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return _MeasuringWriter(self.inner.create_writer(context), self.samples, context.subtask)


def build(env: StreamEnvironment) -> None:
    rate = float(env.args["rate"]) if env.args.get("rate") else None
    source = GeneratorSource(int(env.args["count"]), keys=int(env.args["keys"]), partitions=8, rate=rate)
    (
        env.source(source, name="numbers")
        .map(stamp, name="stamp")
        .key_by(lambda record: record["key"])
        .process(Sum(), name="sum")
        .sink(MeasuringSink(FileSink(env.args["output"]), env.args["samples"]), name="out")
    )
