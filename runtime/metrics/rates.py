"""Per-second rates of a task's counters over a recent window, for the gauges
that a dashboard or an autoscaler reads without a query language.

Sampled when Prometheus scrapes, not on a timer: each scrape adds a sample of
the counters, and a rate is the difference between the newest sample and the
newest one at least `window_s` older (the oldest there is, before the window
has filled; the counters' zero at the task's start before any scrape). Several
scrapers only add samples; a rate never spans less than the window once it has
filled, whatever the scrape interval.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

RATE_WINDOW_S = 10.0
"""What a rate averages over: long enough to smooth frames of 512 records and
1 s backlog refreshes, short enough to follow a load step within a scrape or two."""


@dataclass(frozen=True)
class _Sample:
    at_s: float
    counters: Mapping[str, float]


class WindowedRates:
    """Rates of named counters that only grow (per vertex: records, busy seconds)."""

    def __init__(self, clock: Callable[[], float], started_s: float, window_s: float = RATE_WINDOW_S) -> None:
        self._clock = clock
        self._window_s = window_s
        self._samples: deque[_Sample] = deque([_Sample(started_s, {})])
        self._lock = threading.Lock()  # concurrent scrapes

    def rates(self, counters: Mapping[str, float]) -> dict[str, float]:
        """Per counter, its growth per second up to now (taking `counters` as now's sample)."""
        now = _Sample(self._clock(), dict(counters))
        with self._lock:
            self._samples.append(now)
            while len(self._samples) > 2 and now.at_s - self._samples[1].at_s >= self._window_s:
                self._samples.popleft()
            since = self._samples[0]
        elapsed = now.at_s - since.at_s
        if elapsed <= 0:
            return {}
        return {
            name: (value - since.counters.get(name, 0.0)) / elapsed for name, value in now.counters.items()
        }
