"""The operator's decision for a lost driver, by restart strategy (Flink's semantics)."""

from __future__ import annotations

from lockgate.operator.driver_restarts import decide
from lockgate.operator.spec import RestartStrategySpec


def _strategy(kind: str, **fields: object) -> RestartStrategySpec:
    """The spec's `restartStrategy` section as YAML gives it."""
    return RestartStrategySpec.model_validate({"type": kind, **fields})


def test_fixed_delay_gives_up_after_its_attempts() -> None:
    strategy = _strategy("fixed-delay", attempts=2, delay="5s")
    assert [decide(strategy, n, [], 0).give_up for n in range(3)] == [False, False, True]
    assert decide(strategy, 0, [], 0).delay_s == 5


def test_exponential_backoff_doubles_up_to_its_cap_and_never_gives_up_by_default() -> None:
    strategy = _strategy("exponential-backoff", delay="1s", maxDelay="10s")
    assert [decide(strategy, n, [], 0).delay_s for n in range(6)] == [1, 2, 4, 8, 10, 10]
    assert not decide(strategy, 1000, [], 0).give_up


def test_failure_rate_counts_failures_inside_its_window() -> None:
    strategy = _strategy("failure-rate", attempts=2, delay="1s", failureInterval="60s")
    first = decide(strategy, 0, [], 100.0)
    second = decide(strategy, 1, list(first.failure_times), 130.0)
    third = decide(strategy, 2, list(second.failure_times), 150.0)
    assert (first.give_up, second.give_up, third.give_up) == (False, False, True)
    late = decide(strategy, 2, list(second.failure_times), 170.0)  # the first failure left the window
    assert not late.give_up
    assert late.failure_times == (130.0, 170.0)


def test_none_gives_up_at_once() -> None:
    assert decide(_strategy("none"), 0, [], 0).give_up
