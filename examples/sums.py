"""A keyed running sum over a paced, generated stream:
`lockgate run examples.sums:build --arg count=N --arg rate=R --arg output=URL`.

Record n has key n % keys; the sink receives {"key", "n", "sum"} where "sum" is
the running total of the key — so the output proves both exactly-once delivery
(every n once) and intact keyed state (each key's last sum)."""

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


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.state(ValueStateDescriptor("total", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        total = self.total.value() + value["n"]
        self.total.update(total)
        yield {"key": ctx.current_key, "n": value["n"], "sum": total}


def build(env: StreamEnvironment) -> None:
    rate = env.args.get("rate")
    source = GeneratorSource(
        int(env.args.get("count", "100000")),
        keys=int(env.args.get("keys", "100")),
        partitions=int(env.args.get("partitions", "6")),
        rate=float(rate) if rate else None,
    )
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(env.args["output"]), name="out")
    )


def check(output: list[dict[str, Any]], count: int, keys: int) -> str | None:
    """None if `output` is exactly the reference, else what is wrong."""
    seen = sorted(r["n"] for r in output)
    if seen != list(range(count)):
        missing = len(set(range(count)) - set(seen))
        return f"{missing} records missing, {len(seen) - len(set(seen))} duplicated"
    finals: dict[int, int] = {}
    for record in output:
        finals[record["key"]] = max(finals.get(record["key"], 0), record["sum"])
    wrong = [k for k in range(keys) if finals.get(k) != sum(range(k, count, keys))]
    return f"keys {wrong[:5]} have wrong sums" if wrong else None
