"""A job whose keyed stage costs a known time per record: what busy time measures."""

from __future__ import annotations

import time
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


class CostlySum(KeyedProcessFunction):
    """A running sum per key (`functions.RunningSum`'s output) that spends `cost_s`
    on each record numbered below `cheaper_from`, and `cheaper_s` on each after:
    the load the job is offered drops there, at the same input rate."""

    def __init__(self, cost_s: float, cheaper_from: int | None, cheaper_s: float) -> None:
        self.cost_s, self.cheaper_from, self.cheaper_s = cost_s, cheaper_from, cheaper_s

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.state(ValueStateDescriptor("total", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        cheaper = self.cheaper_from is not None and value["n"] >= self.cheaper_from
        time.sleep(self.cheaper_s if cheaper else self.cost_s)
        total = self.total.value() + value["n"]
        self.total.update(total)
        yield {"key": ctx.current_key, "n": value["n"], "sum": total}


def costly_running_sum(env: StreamEnvironment) -> None:
    """`count` records at `rate` per second over `keys` keys, summed per key at
    `cost_ms` a record (`cheaper_ms` from record `cheaper_from` on)."""
    source = GeneratorSource(
        int(env.args["count"]), keys=int(env.args["keys"]), partitions=4, rate=float(env.args["rate"])
    )
    cheaper_from = int(env.args["cheaper_from"]) if "cheaper_from" in env.args else None
    costly = CostlySum(
        float(env.args["cost_ms"]) / 1000, cheaper_from, float(env.args.get("cheaper_ms", "0")) / 1000
    )
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(costly, name="sum")
        .sink(FileSink(env.args["output"]), name="out")
    )
