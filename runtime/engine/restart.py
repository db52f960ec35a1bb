"""Restart strategies: after a failure, how long to wait before relaunching the
tasks from the latest checkpoint, or that it is time to give up (Flink's four)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Protocol


class RestartStrategy(Protocol):
    def next_delay(self, now: float) -> float | None:
        """Called at each failure (time `now`, monotonic seconds): the delay before
        the next attempt, or None to give up."""
        ...

    def describe(self) -> str: ...


@dataclass
class NoRestart:
    def next_delay(self, now: float) -> float | None:
        return None

    def describe(self) -> str:
        return "no restarts"


@dataclass
class FixedDelay:
    attempts: int
    delay_s: float
    _used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.attempts < 0 or self.delay_s < 0:
            raise ValueError(
                f"fixed-delay needs attempts >= 0 and delay >= 0, got {self.attempts}, {self.delay_s}"
            )

    def next_delay(self, now: float) -> float | None:
        if self._used >= self.attempts:
            return None
        self._used += 1
        return self.delay_s

    def describe(self) -> str:
        return f"fixed delay: {self.attempts} restarts, {self.delay_s} s apart"


@dataclass
class ExponentialBackoff:
    """Delays grow by `multiplier` up to `max_delay_s`; after `reset_after_s` without
    a failure they start over. `attempts` None: restart forever."""

    initial_s: float = 1.0
    max_delay_s: float = 60.0
    multiplier: float = 2.0
    reset_after_s: float = 3600.0
    attempts: int | None = None
    _next: float = field(default=0.0, init=False)
    _last_failure: float | None = field(default=None, init=False)
    _used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_delay_s < self.initial_s or self.multiplier < 1:
            raise ValueError(
                "exponential-backoff needs 0 < initial <= max delay and multiplier >= 1, got "
                f"{self.initial_s}, {self.max_delay_s}, {self.multiplier}"
            )
        self._next = self.initial_s

    def next_delay(self, now: float) -> float | None:
        if self._last_failure is not None and now - self._last_failure >= self.reset_after_s:
            self._next, self._used = self.initial_s, 0
        self._last_failure = now
        if self.attempts is not None and self._used >= self.attempts:
            return None
        self._used += 1
        delay = self._next
        self._next = min(self._next * self.multiplier, self.max_delay_s)
        return delay

    def describe(self) -> str:
        return f"exponential backoff from {self.initial_s} s to {self.max_delay_s} s"


@dataclass
class FailureRate:
    """Restart after `delay_s` unless more than `max_failures` happened within `interval_s`."""

    max_failures: int
    interval_s: float
    delay_s: float
    _failures: collections.deque[float] = field(default_factory=collections.deque, init=False)

    def __post_init__(self) -> None:
        if self.max_failures < 1 or self.interval_s <= 0 or self.delay_s < 0:
            raise ValueError(
                "failure-rate needs max failures >= 1, interval > 0 and delay >= 0, got "
                f"{self.max_failures}, {self.interval_s}, {self.delay_s}"
            )

    def next_delay(self, now: float) -> float | None:
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.interval_s:
            self._failures.popleft()
        if len(self._failures) > self.max_failures:
            return None
        return self.delay_s

    def describe(self) -> str:
        return f"failure rate: at most {self.max_failures} failures in {self.interval_s} s"


STRATEGIES = ("none", "fixed-delay", "exponential-backoff", "failure-rate")


def restart_strategy(
    kind: str,
    *,
    attempts: int | None = None,
    delay_s: float | None = None,
    max_delay_s: float | None = None,
    interval_s: float | None = None,
) -> RestartStrategy:
    """A strategy from its name and options (the CLI's and the manifest's), with
    Flink's defaults for what is not given."""
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(3 if attempts is None else attempts, 1.0 if delay_s is None else delay_s)
    if kind == "exponential-backoff":
        initial = 1.0 if delay_s is None else delay_s
        return ExponentialBackoff(
            initial, max(initial, 60.0 if max_delay_s is None else max_delay_s), attempts=attempts
        )
    if kind == "failure-rate":
        return FailureRate(
            1 if attempts is None else attempts,
            60.0 if interval_s is None else interval_s,
            1.0 if delay_s is None else delay_s,
        )
    raise ValueError(f"restart strategy {kind!r} is not one of {', '.join(STRATEGIES)}")
