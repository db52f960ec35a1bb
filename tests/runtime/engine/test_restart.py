"""Restart strategies decide delays and when to give up, on a given clock."""

from __future__ import annotations

import pytest
from lockgate.runtime.engine.restart import (
    ExponentialBackoff,
    FailureRate,
    FixedDelay,
    NoRestart,
    restart_strategy,
)


def test_no_restart_gives_up_at_once() -> None:
    assert NoRestart().next_delay(0.0) is None


def test_fixed_delay_allows_exactly_its_attempts() -> None:
    strategy = FixedDelay(attempts=2, delay_s=5.0)
    assert [strategy.next_delay(t) for t in (0.0, 1.0, 2.0)] == [5.0, 5.0, None]


def test_exponential_backoff_grows_caps_and_resets_after_a_quiet_period() -> None:
    strategy = ExponentialBackoff(initial_s=1.0, max_delay_s=5.0, multiplier=2.0, reset_after_s=100.0)
    assert [strategy.next_delay(float(t)) for t in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert strategy.next_delay(200.0) == 1.0, "a long quiet period starts the backoff over"


def test_exponential_backoff_with_a_limit_gives_up() -> None:
    strategy = ExponentialBackoff(initial_s=1.0, max_delay_s=5.0, attempts=2)
    assert [strategy.next_delay(float(t)) for t in range(3)] == [1.0, 2.0, None]


def test_failure_rate_gives_up_only_when_failures_crowd_together() -> None:
    strategy = FailureRate(max_failures=2, interval_s=10.0, delay_s=0.5)
    assert strategy.next_delay(0.0) == 0.5
    assert strategy.next_delay(20.0) == 0.5, "the first failure is outside the window"
    assert strategy.next_delay(25.0) == 0.5
    assert strategy.next_delay(26.0) is None, "three failures within 10 s"


def test_strategies_by_name_and_bad_options_are_named() -> None:
    assert isinstance(restart_strategy("fixed-delay", attempts=1, delay_s=0.1), FixedDelay)
    assert isinstance(restart_strategy("exponential-backoff"), ExponentialBackoff)
    with pytest.raises(ValueError, match="'sometimes' is not one of none, fixed-delay"):
        restart_strategy("sometimes")
    with pytest.raises(ValueError, match="fixed-delay needs attempts >= 0"):
        restart_strategy("fixed-delay", attempts=-1)
