"""The keyed functions the tests' jobs run: the tests' own, so an example can
change without changing what a test checks."""

from __future__ import annotations

import time
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


class SlowRunningSum(RunningSum):
    """`RunningSum` that takes `seconds` per record: a hot operator that backpressures its input."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        time.sleep(self.seconds)
        yield from super().process(value, ctx)


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


SESSIONS = ValueStateDescriptor("sessions", default=())


class SessionsByTimers(KeyedProcessFunction):
    """Sessions of a key by event time, with timers alone: records less than `gap`
    ms apart are one session; it is emitted when the watermark passes its last
    record plus `gap`. Several sessions of a key may wait at once (a fast partition
    runs ahead of the watermark)."""

    def __init__(self, gap: int) -> None:
        self.gap = gap

    def open(self, ctx: RuntimeContext) -> None:
        self.sessions = ctx.state(SESSIONS)

    def process(self, value: Any, ctx: Context) -> None:
        timestamp = ctx.timestamp
        assert timestamp is not None, "records carry event time"
        start, last, count = timestamp, timestamp, 1
        kept = []
        for session in self.sessions.value():  # (start, last, count)
            if session[0] - self.gap < timestamp < session[1] + self.gap:
                # The record joins this session, and through it any other it reaches.
                ctx.timers.delete_event_time_timer(session[1] + self.gap)
                start, last, count = min(start, session[0]), max(last, session[1]), count + session[2]
            else:
                kept.append(session)
        ctx.timers.register_event_time_timer(last + self.gap)
        self.sessions.update((*kept, (start, last, count)))

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[dict[str, Any]]:
        sessions = list(self.sessions.value())
        for start, last, count in sessions:
            if last + self.gap == timestamp:
                yield {"user": ctx.current_key, "start": start, "end": timestamp, "count": count}
        self.sessions.update(tuple(s for s in sessions if s[1] + self.gap != timestamp))


class SlowIdentity:
    """A map that takes `seconds` per record and passes it on unchanged: a slow
    stateless operator right after a key_by (it backpressures its input)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, record: Any) -> Any:
        time.sleep(self.seconds)
        return record


class CountThrough(KeyedProcessFunction):
    """Passes each record on with `through`: how many records its key has passed so far
    (keyed state, to show a second keyed operator's state exact too)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        n = self.count.value() + 1
        self.count.update(n)
        yield {**value, "through_key": ctx.current_key, "through": n}
