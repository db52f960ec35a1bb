"""Clocks: state TTL, the checkpoint coordinator and the in-memory control plane
read one, so tests can move time by hand instead of waiting for it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch: what records carry."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back: what intervals, deadlines and
        lease expiries are measured on (a wall clock stepped by NTP would fire them early
        or late)."""
        ...


class SystemClock:
    """The machine's clocks: wall time for records, a monotonic clock for intervals and
    deadlines."""

    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        """A monotonic clock in milliseconds, for intervals and deadlines."""
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; both of its readings are the same."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        """The clock's time, in milliseconds since the epoch."""
        return self._now

    def monotonic_ms(self) -> int:
        """The same time, as the monotonic clock: both move only with `advance`."""
        return self._now

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` milliseconds."""
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {ms} ms)")
        self._now += ms
