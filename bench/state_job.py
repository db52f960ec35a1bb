"""The job the recovery benchmark runs: every key holds `value_bytes` of random
bytes in RocksDB, written when the key is first seen, and a count updated at
each of its records, so the state is about keys x value_bytes once every key
was seen. (Rewriting the blob at every record would measure RocksDB's space
amplification between compactions rather than a state of known size.)

Each output record carries the key's count after it, so that the output can be
checked exactly (`rescale_downtime.py`): with `keys` a multiple of the source's
8 partitions, every record of a key comes from one partition, in order, so
record n must say count n // keys + 1. Optional arguments: `rate` caps the
source's records per second; `arrivals`, a local directory, makes the sink an
`ArrivalFileSink` noting when records reach it (`arrival_sink.py`)."""

from __future__ import annotations

import random
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

from bench.arrival_sink import ArrivalFileSink, mark


class Blob(KeyedProcessFunction):
    def __init__(self, value_bytes: int) -> None:
        self.value_bytes = value_bytes

    def open(self, ctx: RuntimeContext) -> None:
        self.blob = ctx.state(ValueStateDescriptor("blob"))
        self.count = ctx.state(ValueStateDescriptor("count", default=0))
        self.random = random.Random(ctx.subtask_index)

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        if self.blob.value() is None:
            self.blob.update(self.random.randbytes(self.value_bytes))  # incompressible, like real state
        self.count.update(self.count.value() + 1)
        yield {"key": value["key"], "n": value["n"], "count": self.count.value()}


def build(env: StreamEnvironment) -> None:
    rate = float(env.args["rate"]) if "rate" in env.args else None
    source = GeneratorSource(None, keys=int(env.args["keys"]), partitions=8, rate=rate)
    arrivals = env.args.get("arrivals")
    sink = FileSink(env.args["output"]) if arrivals is None else ArrivalFileSink(env.args["output"], arrivals)
    if arrivals is not None:
        mark(arrivals, "graph built")  # in a task: its Python worker runs, before its exchange and restore
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(Blob(int(env.args["value_bytes"])), name="blob")
        .sink(sink, name="out")
    )
