"""A job whose keyed stage costs a known time per record: what busy time measures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from lockgate.runtime import Context, FileSink, GeneratorSource, KeyedProcessFunction, StreamEnvironment


class Costly(KeyedProcessFunction):
    """Spends `cost_s` of the thread's time on each record (the work a real
    function would do), then passes it on."""

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        time.sleep(self.cost_s)
        yield value


def costly_pass(env: StreamEnvironment) -> None:
    """`rate` records/s (unthrottled without it) through a keyed stage of `cost_ms` a record."""
    rate = float(env.args["rate"]) if "rate" in env.args else None
    source = GeneratorSource(None, keys=16, partitions=1, rate=rate)
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(Costly(float(env.args["cost_ms"]) / 1000), name="costly")
        .sink(FileSink(env.args["output"]), name="out")
    )
