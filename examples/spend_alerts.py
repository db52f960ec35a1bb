"""Card spend alerts:
`lockgate run examples/spend_alerts.py:build --arg input=URL --arg output=URL --arg limit=100`.

Reads payments, JSON lines of {"card": ..., "amount": ...}; keeps each card's
spend in keyed state that is forgotten after an hour without a payment (state
TTL, in processing time); writes {"card", "spend", "alert"} for every payment,
with "alert" true once the card's spend passes the limit. Its unit test,
test_spend_alerts.py beside it, runs it in-process with `lockgate.testing`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    KeyedProcessFunction,
    LogSource,
    RuntimeContext,
    StreamEnvironment,
    ValueStateDescriptor,
)

FORGET_AFTER = timedelta(hours=1)


class CardSpend(KeyedProcessFunction):
    def __init__(self, limit: float) -> None:
        self.limit = limit

    def open(self, ctx: RuntimeContext) -> None:
        self.spend = ctx.state(ValueStateDescriptor("spend", default=0, ttl=FORGET_AFTER))

    def process(self, payment: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        spend = self.spend.value() + payment["amount"]
        self.spend.update(spend)
        yield {"card": ctx.current_key, "spend": spend, "alert": spend > self.limit}


def build(env: StreamEnvironment) -> None:
    limit = float(env.args.get("limit", "1000"))
    (
        env.source(LogSource(env.args["input"]), name="payments")
        .key_by(lambda payment: payment["card"])
        .process(CardSpend(limit), name="spend")
        .sink(FileSink(env.args["output"]), name="alerts")
    )
