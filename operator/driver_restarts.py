"""When and whether to restart a lost driver: the job's restart strategy applied
by the operator, with its state (restarts, failure times) kept in status."""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.operator.spec import RestartStrategySpec

DEFAULT_DELAY_S, DEFAULT_MAX_DELAY_S, DEFAULT_ATTEMPTS, DEFAULT_WINDOW_S = 1.0, 60.0, 3, 60.0


@dataclass(frozen=True)
class RestartDecision:
    give_up: bool
    delay_s: float
    failure_times: tuple[float, ...]  # failure-rate: the failures still inside the window


def decide(
    strategy: RestartStrategySpec, restarts: int, failure_times: list[float], now: float
) -> RestartDecision:
    """The decision for a driver lost at `now`, after `restarts` earlier restarts."""
    delay = strategy.delay_s if strategy.delay_s is not None else DEFAULT_DELAY_S
    if strategy.type == "none":
        return RestartDecision(True, 0.0, ())
    if strategy.type == "failure-rate":
        window = strategy.failure_interval_s or DEFAULT_WINDOW_S
        recent = (*[t for t in failure_times if now - t < window], now)
        return RestartDecision(len(recent) > (strategy.attempts or 1), delay, recent)
    if strategy.type == "exponential-backoff":
        capped = min(strategy.max_delay_s or DEFAULT_MAX_DELAY_S, delay * 2**restarts)
        return RestartDecision(strategy.attempts is not None and restarts >= strategy.attempts, capped, ())
    return RestartDecision(restarts >= (strategy.attempts or DEFAULT_ATTEMPTS), delay, ())  # fixed-delay
