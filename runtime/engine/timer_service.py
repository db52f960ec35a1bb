"""A keyed operator's timers: the `ctx.timers` its function registers with, and
what is due. The timers themselves are keyed state (`state/timers.py`): one queue
per time domain, opened when first used or when a restore brought timers, so a
job that never sets a timer keeps no timer state."""

from __future__ import annotations

from typing import Any

from lockgate.runtime.api.functions import TimeDomain
from lockgate.runtime.engine.events import NO_WATERMARK
from lockgate.runtime.state.backend import KeyedStateBackend
from lockgate.runtime.state.timers import DueTimer, TimerQueue

QUEUES: dict[TimeDomain, str] = {
    "event_time": "_timers.event_time",
    "processing_time": "_timers.processing_time",
}


class TimerRegistrationError(ValueError):
    """A function asked for a timer the runtime cannot keep; the message says why."""


class OperatorTimers:
    def __init__(self, vertex: str, backend: KeyedStateBackend) -> None:
        self._vertex = vertex
        self._backend = backend
        self._queues: dict[TimeDomain, TimerQueue] = {
            domain: backend.timer_queue(name) for domain, name in QUEUES.items() if name in backend.metas
        }
        self.watermark = NO_WATERMARK

    def _change(self, domain: TimeDomain, timestamp: Any, register: bool) -> None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise TimerRegistrationError(
                f"{self._vertex}: a timer's timestamp is an int of milliseconds since the epoch, "
                f"got {timestamp!r} ({type(timestamp).__name__})"
            )
        current = self._backend.current
        if not current.is_set:
            raise TimerRegistrationError(
                f"{self._vertex}: timers belong to a key; set them in process() or on_timer(), not in open()"
            )
        if (queue := self._queues.get(domain)) is None:
            queue = self._queues[domain] = self._backend.timer_queue(QUEUES[domain])
        change = queue.add if register else queue.remove
        try:
            change(current.key_group, timestamp, current.key_bytes)
        except ValueError as error:
            raise TimerRegistrationError(f"{self._vertex}: {error}") from None

    # -- ctx.timers ----------------------------------------------------------------

    def register_event_time_timer(self, timestamp: int) -> None:
        self._change("event_time", timestamp, True)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._change("processing_time", timestamp, True)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._change("event_time", timestamp, False)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._change("processing_time", timestamp, False)

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self._backend.clock.now_ms()

    # -- what fires ----------------------------------------------------------------

    def due(self, domain: TimeDomain, up_to: int) -> list[DueTimer]:
        """The next batch of timers of `domain` at or before `up_to`, removed."""
        if (queue := self._queues.get(domain)) is None:
            return []
        earliest = queue.earliest()
        return [] if earliest is None or earliest > up_to else queue.pop_due(up_to)
