"""Where a chain's thread spends its time: busy, idle (waiting for input) or
backpressured (waiting for credit downstream).

Only the waits are timed, where the thread has nothing to do anyway: the record
path carries no clock. Busy time is what is left of the elapsed time once the
waits are taken out — reading, the operators' work, writing to sinks, the
synchronous part of snapshots. Backpressure is timed by the channels
(`OutputChannel.blocked_s`), so the chain adds it in when asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ChainTime:
    """One chain's clock: written by its thread, read by the metrics on another."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: float | None = None
        self._stopped: float | None = None
        self.idle_s = 0.0
        """Seconds the thread waited for input (or, once its input ended, for commits)."""
        self._busy_reported = 0.0

    def start(self) -> None:
        self._started = self._clock()

    def stop(self) -> None:
        if self._started is not None and self._stopped is None:
            self._stopped = self._clock()

    def waited_since(self, started: float) -> None:
        """Counts the time since `started` (read from `now()`) as idle."""
        self.idle_s += self._clock() - started

    def now(self) -> float:
        return self._clock()

    def elapsed_s(self) -> float:
        """Seconds since the chain started its loop, up to now or to its end."""
        if self._started is None:
            return 0.0
        end = self._stopped if self._stopped is not None else self._clock()
        return end - self._started

    def busy_s(self, backpressured_s: float) -> float:
        """Seconds of work: elapsed, less idle, less `backpressured_s` (what the
        chain's output channels measured), never less than last reported: a
        wait still under way is counted when it ends, and until then it looks
        like work; a counter must not go back when it is taken out."""
        busy = self.elapsed_s() - self.idle_s - backpressured_s
        self._busy_reported = max(self._busy_reported, busy)
        return self._busy_reported
