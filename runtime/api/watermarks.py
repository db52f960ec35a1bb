"""Event time for a source: where each record's timestamp comes from and how far
behind the newest timestamp the watermark trails (Flink's WatermarkStrategy).

    WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
        .with_timestamp_assigner(lambda r: r["ts"])      # epoch milliseconds, an int
        .with_idleness(timedelta(seconds=30))

The watermark of a partition is the largest timestamp it has read, minus the
out-of-orderness, minus 1 ms: a record at the watermark or before it is late. A
subtask's watermark is the least over its partitions; a partition that has read
nothing for the idleness timeout does not hold it back. A source sends its
watermark on at most once per interval (200 ms unless set, as Flink's
auto-watermark interval): each one flushes the batches under way to every
downstream subtask, so sending one per batch read would halve their size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from lockgate.runtime.api.validation import check_callable, milliseconds

TimestampAssigner = Callable[[Any], int]


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source's records get event time (`with_timestamp_assigner`) and how its
    watermarks trail them: made with `for_bounded_out_of_orderness` or
    `for_monotonous_timestamps`."""

    out_of_orderness_ms: int
    timestamp_assigner: TimestampAssigner | None = None
    idleness_ms: int | None = None
    interval_ms: int = 200

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: timedelta) -> WatermarkStrategy:
        """Watermarks that trail the newest timestamp of each partition by
        `max_out_of_orderness` (and 1 ms): a record up to that much older than the
        newest is not late."""
        return WatermarkStrategy(
            milliseconds(max_out_of_orderness, "WatermarkStrategy out-of-orderness", positive=False)
        )

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Timestamps never go back within a partition."""
        return WatermarkStrategy(0)

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> WatermarkStrategy:
        """`assigner(record)`: the record's event time, in milliseconds since the epoch."""
        check_callable("with_timestamp_assigner", assigner)
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, timeout: timedelta) -> WatermarkStrategy:
        """A partition that has read nothing for `timeout` (processing time) stops
        holding the watermark back until it reads again."""
        return replace(self, idleness_ms=milliseconds(timeout, "WatermarkStrategy idleness"))

    def with_watermark_interval(self, interval: timedelta) -> WatermarkStrategy:
        """Send the watermark on at most once per `interval` of processing time
        (default 200 ms; zero: after every batch read). Windows and timers fire up to
        that much later; the end of bounded input is sent at once."""
        return replace(
            self, interval_ms=milliseconds(interval, "WatermarkStrategy watermark interval", positive=False)
        )
