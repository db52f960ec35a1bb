"""Click sessions by event time: `lockgate run examples.sessions:build --arg input=URL --arg output=URL`.

Clicks `{"user", "ts"}` (ts: epoch milliseconds) arrive out of order, by up to
`max_delay_ms` (default 2 s) within a partition. A user's clicks less than 30 s
apart are one session; once the watermark has passed a session's last click plus
30 s, the job emits `{"user", "start", "end", "clicks"}`. Clicks that arrive after
their session was emitted and the 10 s of allowed lateness ran out are dropped and
counted (`lockgate_late_records_dropped_total{vertex="sessions"}`); within the
lateness, the session is emitted again with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    EventTimeSessionWindows,
    FileSink,
    LogSource,
    ProcessWindowFunction,
    StreamEnvironment,
    TimeWindow,
    WatermarkStrategy,
)

GAP = timedelta(seconds=30)


class Session(ProcessWindowFunction):
    def process(
        self, key: Any, window: TimeWindow, elements: list[Any], ctx: Any
    ) -> Iterator[dict[str, Any]]:
        first = min(click["ts"] for click in elements)
        last = max(click["ts"] for click in elements)
        yield {"user": key, "start": first, "end": last, "clicks": len(elements)}


def build(env: StreamEnvironment) -> None:
    delay = timedelta(milliseconds=int(env.args.get("max_delay_ms", "2000")))
    watermarks = (
        WatermarkStrategy.for_bounded_out_of_orderness(delay)
        .with_timestamp_assigner(lambda click: click["ts"])
        .with_idleness(timedelta(seconds=30))
    )
    (
        env.source(LogSource(env.args["input"]), name="clicks", watermarks=watermarks)
        .key_by(lambda click: click["user"])
        .window(EventTimeSessionWindows.with_gap(GAP))
        .allowed_lateness(timedelta(seconds=10))
        .process(Session(), name="sessions")
        .sink(FileSink(env.args["output"]), name="out")
    )
