"""The keyed functions the tests' jobs run: the tests' own, so an example can
change without changing what a test checks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lockgate.runtime import Context, KeyedProcessFunction, RuntimeContext, ValueStateDescriptor


class CountWords(KeyedProcessFunction):
    """Each word with how many times it was seen so far."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}


class RunningSum(KeyedProcessFunction):
    """Each record with the sum of its key's `n` so far."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.state(ValueStateDescriptor("total", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        total = self.total.value() + value["n"]
        self.total.update(total)
        yield {"key": ctx.current_key, "n": value["n"], "sum": total}


class FirstSeen(KeyedProcessFunction):
    """Sets a processing-time timer for now at a key's first record; when it fires,
    emits the key once (a timer per key and timestamp fires once)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.state(ValueStateDescriptor("seen", default=False))

    def process(self, value: Any, ctx: Context) -> None:
        if not self.seen.value():
            self.seen.update(True)
            now = ctx.timers.current_processing_time()
            ctx.timers.register_processing_time_timer(now)
            ctx.timers.register_processing_time_timer(now)  # the same timer: it fires once

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[dict[str, Any]]:
        yield {"key": ctx.current_key, "timer": timestamp, "domain": ctx.time_domain}
