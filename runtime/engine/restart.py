"""Restart strategies: after a failure, how long to wait before relaunching from
the latest checkpoint, or that it is time to give up — Flink's four, as one pure
function, `decide(strategy, history, now)`.

The job's strategy is applied in one place, the job master, to every failure of
its tasks (on the monotonic clock, the history in memory), on a laptop as on a
cluster. The operator uses the same rules only for its own backoff between
relaunches of a lost driver (on the wall clock, the history in the
StreamingJob's status, so that it outlives the operator).

- fixed-delay: `attempts` restarts in the job's life, `delay` apart.
- exponential-backoff: delays from `delay`, doubling, capped at `maxDelay`;
  `attempts` restarts at most (none given: forever). After `reset_after_s`
  without a failure the backoff starts over (Flink's resetBackoffThreshold).
- failure-rate: a restart after `delay` unless more than `attempts` failures
  fall within `failureInterval`; a failure exactly `failureInterval` ago is
  still inside it (Flink's rule: it leaves only once more time has passed).
- none: never restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast, get_args

from lockgate.runtime.spec.model import RestartStrategySpec, RestartType

STRATEGIES: tuple[str, ...] = get_args(RestartType)
_DEFAULTS = RestartStrategySpec()


@dataclass(frozen=True)
class RestartStrategy:
    """A strategy's settings, complete (`restart_strategy` fills in the defaults)."""

    kind: RestartType
    attempts: int | None
    delay_s: float
    max_delay_s: float
    interval_s: float
    multiplier: float = 2.0
    reset_after_s: float = 3600.0

    def describe(self) -> str:
        if self.kind == "fixed-delay":
            return f"fixed delay: {self.attempts} restarts, {self.delay_s:g} s apart"
        if self.kind == "exponential-backoff":
            limit = "" if self.attempts is None else f", {self.attempts} restarts"
            return f"exponential backoff from {self.delay_s:g} s to {self.max_delay_s:g} s{limit}"
        if self.kind == "failure-rate":
            return f"failure rate: at most {self.attempts} failures in {self.interval_s:g} s"
        return "no restarts"


@dataclass(frozen=True)
class RestartHistory:
    """The failures that count for the next decision, oldest first."""

    failures: tuple[float, ...] = ()


@dataclass(frozen=True)
class RestartDecision:
    delay_s: float | None  # None: give up
    history: RestartHistory = field(default_factory=RestartHistory)  # what to keep for the next one

    @property
    def give_up(self) -> bool:
        return self.delay_s is None


def decide(strategy: RestartStrategy, history: RestartHistory, now: float) -> RestartDecision:
    """The decision for a failure at `now` (seconds on the caller's clock, the
    clock `history` was kept on)."""
    failures = history.failures
    if strategy.kind == "none":
        return RestartDecision(None, history)
    if strategy.kind == "failure-rate":
        recent = (*(t for t in failures if now - t <= strategy.interval_s), now)
        assert strategy.attempts is not None
        too_many = len(recent) > strategy.attempts
        return RestartDecision(None if too_many else strategy.delay_s, RestartHistory(recent))
    if strategy.kind == "exponential-backoff":
        if failures and now - failures[-1] >= strategy.reset_after_s:
            failures = ()  # quiet for long enough: start over
        if strategy.attempts is not None and len(failures) >= strategy.attempts:
            return RestartDecision(None, RestartHistory(failures))
        delay = min(strategy.delay_s * strategy.multiplier ** len(failures), strategy.max_delay_s)
        return RestartDecision(delay, RestartHistory((*failures, now)))
    assert strategy.attempts is not None  # fixed-delay
    if len(failures) >= strategy.attempts:
        return RestartDecision(None, history)
    return RestartDecision(strategy.delay_s, RestartHistory((*failures, now)))


def restart_strategy(
    kind: str,
    *,
    attempts: int | None = None,
    delay_s: float | None = None,
    max_delay_s: float | None = None,
    failure_interval_s: float | None = None,
) -> RestartStrategy:
    """A strategy from its name and options (the CLI's and the StreamingJob's),
    with the spec's defaults for what is not given; raises ValueError naming a bad one."""
    if kind not in STRATEGIES:
        raise ValueError(f"restart strategy {kind!r} is not one of {', '.join(STRATEGIES)}")
    delay = _DEFAULTS.delay_s if delay_s is None else delay_s
    if delay < 0 or (attempts is not None and attempts < 0):
        raise ValueError(f"{kind} needs attempts >= 0 and delay >= 0, got {attempts}, {delay}")
    if attempts is None:
        attempts = RestartStrategySpec.DEFAULT_ATTEMPTS.get(kind)
    if kind == "failure-rate" and (attempts is None or attempts < 1):
        raise ValueError(f"failure-rate needs at least 1 failure per interval, got {attempts}")
    cap = _DEFAULTS.max_delay_s if max_delay_s is None else max_delay_s
    if kind == "exponential-backoff" and delay <= 0:
        raise ValueError(f"exponential-backoff needs a first delay > 0, got {delay}")
    window = _DEFAULTS.failure_interval_s if failure_interval_s is None else failure_interval_s
    if window <= 0:
        raise ValueError(f"failure-rate needs an interval > 0, got {window}")
    return RestartStrategy(cast(RestartType, kind), attempts, delay, max(delay, cap), window)
