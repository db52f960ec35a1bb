"""Event time at a source subtask: each record's timestamp from the strategy's
assigner, a watermark per partition (its largest timestamp, minus the allowed
out-of-orderness, minus 1 ms), and the subtask's watermark as the least over its
partitions. A partition that has read nothing yet holds the watermark back (its
old records may still come) unless the idleness timeout passes; when every
partition is idle the subtask says so, and downstream stops waiting for it.
Watermarks are not checkpointed: after a restore they start over and catch up
with the first records, as in Flink. Without an idleness timeout, a partition that
reads nothing holds the watermark back for good, and windows downstream wait
without a word: after `STALL_WARNING_MS` of it, while other partitions read on, a
warning names the partition and `with_idleness`, once per stall.

A reader that states its watermarks in its stream (`WatermarksInStream`, what
`lockgate.testing`'s marks read) gets `StatedWatermarks` instead: its records
still get their timestamps from the assigner, but its watermarks are the ones it
states, at their place in the stream, and nothing else — no interval, no
out-of-orderness, no idleness — so that a test of late data is deterministic."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from lockgate.runtime.api.connectors import SourceReader
from lockgate.runtime.api.watermarks import WatermarkStrategy
from lockgate.runtime.engine.events import NO_WATERMARK, EventTime, Idle, Watermark

log = logging.getLogger(__name__)

STALL_WARNING_MS = 30_000
"""How long a partition may read nothing and hold the watermark back, while others
read, before a source without an idleness timeout warns of it."""


class TimestampError(ValueError):
    """A timestamp assigner returned what is not an event time; the message names
    the source, the partition and the record."""


class SourceWatermarks:
    def __init__(
        self,
        vertex: str,
        strategy: WatermarkStrategy,
        now_ms: Callable[[], int],
        stall_warning_ms: int = STALL_WARNING_MS,
    ) -> None:
        assert strategy.timestamp_assigner is not None, "checked when the source was declared"
        self._vertex = vertex
        self._assign = strategy.timestamp_assigner
        self._delay = strategy.out_of_orderness_ms
        self._idleness = strategy.idleness_ms
        self._now_ms = now_ms
        self._started = now_ms()
        self._newest: dict[str, int] = {}  # per partition: the largest timestamp read
        self._active_at: dict[str, int] = {}  # per partition: when it last read a record
        self._emitted = NO_WATERMARK
        self._idle = False
        self._interval = strategy.interval_ms
        self._next_check = self._started
        self._stall_warning_ms = stall_warning_ms
        self._warned: dict[str, int] = {}  # per partition: the last read of the stall it was warned of

    def timestamps(self, partition: str, records: list[Any]) -> list[int | None]:
        assign = self._assign
        stamps: list[int | None] = []
        newest = self._newest.get(partition, NO_WATERMARK)
        for record in records:
            timestamp = assign(record)
            if isinstance(timestamp, bool) or not isinstance(timestamp, int):
                raise TimestampError(
                    f"source {self._vertex!r}, partition {partition or '(all)'}: the timestamp "
                    f"assigner returned {timestamp!r} ({type(timestamp).__name__}) for {record!r}; "
                    "it must return an int of milliseconds since the epoch"
                )
            stamps.append(timestamp)
            newest = max(newest, timestamp)
        if records:
            self._newest[partition] = newest
            self._active_at[partition] = self._now_ms()
        return stamps

    def _holds_back(self, partition: str, now: int) -> bool:
        return self._idleness is None or now - self._active_at.get(partition, self._started) < self._idleness

    def next_marks(self, partitions: Iterable[str]) -> list[EventTime]:
        """What to send downstream now: a higher watermark, or — once every partition
        has been idle for the timeout — the highest watermark any of them reached
        (no partition holds it back any more; Flink's valve does the same) and then
        idleness, said once. Nothing until the strategy's interval has passed since
        the last time it looked."""
        now = self._now_ms()
        if now < self._next_check:
            return []
        self._next_check = now + self._interval
        partitions = list(partitions)
        if self._idleness is None:
            self._warn_of_stalls(partitions, now)
        active = [p for p in partitions if self._holds_back(p, now)]
        if not active:
            if self._idle:
                return []
            self._idle = True
            reached = [self._newest[p] - self._delay - 1 for p in partitions if p in self._newest]
            return [*self._rise(max(reached, default=NO_WATERMARK)), Idle()]
        self._idle = False
        return self._rise(
            min(self._newest[p] - self._delay - 1 if p in self._newest else NO_WATERMARK for p in active)
        )

    def _partition_watermark(self, partition: str) -> int:
        newest = self._newest.get(partition)
        return NO_WATERMARK if newest is None else newest - self._delay - 1

    def _warn_of_stalls(self, partitions: list[str], now: int) -> None:
        """Warn, once per stall, of a partition that has read nothing for the stall
        interval while another read after it, and whose watermark is the least."""
        least = min((self._partition_watermark(p) for p in partitions), default=NO_WATERMARK)
        latest_read = max(self._active_at.values(), default=None)
        for partition in partitions:
            last_read = self._active_at.get(partition, self._started)
            stalled = (
                now - last_read >= self._stall_warning_ms
                and latest_read is not None
                and latest_read > last_read
                and self._partition_watermark(partition) == least
                and self._warned.get(partition) != last_read
            )
            if stalled:
                self._warned[partition] = last_read
                log.warning(
                    "source %r: partition %s has read nothing for %.0f s and holds the watermark back "
                    "while other partitions read on: event-time windows and timers downstream wait "
                    "for it. If it may stay empty, give the source's WatermarkStrategy "
                    ".with_idleness(timedelta(seconds=...)): a partition silent that long then stops "
                    "holding the watermark back",
                    self._vertex,
                    partition or "(all)",
                    (now - last_read) / 1000,
                )

    def _rise(self, watermark: int) -> list[EventTime]:
        if watermark <= self._emitted:
            return []
        self._emitted = watermark
        return [Watermark(watermark)]


class WatermarksInStream(ABC):
    """A source reader that states its own watermarks: a poll ends its batch at a
    stated watermark, which `take_watermarks` then returns."""

    @abstractmethod
    def take_watermarks(self) -> list[int]:
        """The watermarks the last poll reached, in order, each once."""


class StatedWatermarks(SourceWatermarks):
    """The watermarks a `WatermarksInStream` reader states, sent right after the
    records before them; a subtask with no partition to read says it is idle."""

    def __init__(self, vertex: str, strategy: WatermarkStrategy, reader: WatermarksInStream) -> None:
        super().__init__(vertex, strategy, lambda: 0)
        self._reader = reader

    def next_marks(self, partitions: Iterable[str]) -> list[EventTime]:
        if not list(partitions):
            if self._idle:
                return []
            self._idle = True
            return [Idle()]
        return [mark for stated in self._reader.take_watermarks() for mark in self._rise(stated)]


def source_watermarks(
    vertex: str, strategy: WatermarkStrategy, reader: SourceReader, now_ms: Callable[[], int]
) -> SourceWatermarks:
    """Event time at a source subtask reading with `reader`: the watermarks it
    states if it states them, else the strategy's."""
    if isinstance(reader, WatermarksInStream):
        return StatedWatermarks(vertex, strategy, reader)
    return SourceWatermarks(vertex, strategy, now_ms)
