"""Clocks: state TTL, the checkpoint coordinator, the coordinator's leadership and
the in-memory control plane read one, so tests can move time by hand instead of
waiting for it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Where the runtime reads time: `now_ms` for records, timers and TTL, `monotonic_ms`
    for intervals and deadlines. `SystemClock` in jobs; `ManualClock` in tests, moved by
    hand."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch: what records carry."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back: what intervals, deadlines and
        lease expiries are measured on (a wall clock stepped by NTP would fire them early
        or late)."""
        ...


class WaitableClock(Clock, Protocol):
    """A clock that can also be waited on: what a loop that acts every so often on
    its own schedule (a lease's keep-alive, a takeover's wait) reads."""

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""
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

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of real time."""
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to; both of its readings are the same."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        # Who waits in `sleep`, on which event loop: `advance` may run on another thread.
        self._sleepers: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """The clock's time, in milliseconds since the epoch."""
        return self._now

    def monotonic_ms(self) -> int:
        """The same time, as the monotonic clock: both move only with `advance`."""
        return self._now

    @property
    def sleepers(self) -> int:
        """How many `sleep` calls wait now: a test moves the clock once the loop it
        drives has gone to sleep on it."""
        with self._lock:
            return len(self._sleepers)

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` milliseconds."""
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {ms} ms)")
        with self._lock:
            self._now += ms
            due = [s for s in self._sleepers if s[0] <= self._now]
            self._sleepers = [s for s in self._sleepers if s[0] > self._now]
        for _, loop, future in due:
            loop.call_soon_threadsafe(_wake, future)

    async def sleep(self, seconds: float) -> None:
        """Return once the clock has been advanced `seconds` past its reading now."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            deadline = self._now + max(0, round(seconds * 1000))
            if deadline > self._now:
                self._sleepers.append((deadline, loop, future))
            else:
                future.set_result(None)
        try:
            await future
        finally:
            with self._lock:
                self._sleepers = [s for s in self._sleepers if s[2] is not future]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
