"""Restart strategies decide delays and when to give up, from the failures so far
and a clock the caller gives: the one implementation the job master and the
operator share."""

from __future__ import annotations

import pytest
from lockgate.runtime.engine.restart import RestartHistory, RestartStrategy, decide, restart_strategy


def _delays(strategy: RestartStrategy, times: list[float]) -> list[float | None]:
    """The delay decided at each failure time in turn (None: gave up)."""
    history, delays = RestartHistory(), []
    for now in times:
        decision = decide(strategy, history, now)
        history = decision.history
        delays.append(decision.delay_s)
    return delays


def test_no_restart_gives_up_at_once() -> None:
    assert _delays(restart_strategy("none"), [0.0]) == [None]


def test_fixed_delay_allows_exactly_its_attempts() -> None:
    assert _delays(restart_strategy("fixed-delay", attempts=2, delay_s=5.0), [0.0, 1.0, 2.0]) == [
        5.0,
        5.0,
        None,
    ]
    assert _delays(restart_strategy("fixed-delay"), [0.0, 1e6, 2e6, 3e6]) == [1.0, 1.0, 1.0, None], (
        "3 by default, over the job's whole life"
    )


def test_exponential_backoff_grows_caps_and_resets_after_a_quiet_period() -> None:
    strategy = restart_strategy("exponential-backoff", delay_s=1.0, max_delay_s=5.0)
    assert _delays(strategy, [0.0, 1.0, 2.0, 3.0, 4.0]) == [1.0, 2.0, 4.0, 5.0, 5.0]
    grown = RestartHistory((0.0, 1.0, 2.0))
    assert decide(strategy, grown, 2.0 + 3599.0).delay_s == 5.0, "not yet quiet for an hour"
    after_quiet = decide(strategy, grown, 2.0 + 3600.0)
    assert (after_quiet.delay_s, after_quiet.history.failures) == (1.0, (3602.0,)), "starts over"


def test_exponential_backoff_with_a_limit_gives_up_and_without_one_never_does() -> None:
    limited = restart_strategy("exponential-backoff", delay_s=1.0, max_delay_s=5.0, attempts=2)
    assert _delays(limited, [0.0, 1.0, 2.0]) == [1.0, 2.0, None]
    endless = restart_strategy("exponential-backoff")
    assert _delays(endless, [float(t) for t in range(100)])[-1] == 60.0


def test_failure_rate_gives_up_only_when_failures_crowd_together() -> None:
    strategy = restart_strategy("failure-rate", attempts=2, failure_interval_s=10.0, delay_s=0.5)
    assert _delays(strategy, [0.0, 20.0, 25.0, 26.0]) == [0.5, 0.5, 0.5, None], "three within 10 s"


def test_a_failure_exactly_one_interval_ago_is_still_inside_it() -> None:
    """Flink's edge: a failure leaves the window only once more than the interval passed."""
    strategy = restart_strategy("failure-rate", attempts=1, failure_interval_s=10.0)
    assert decide(strategy, RestartHistory((0.0,)), 10.0).give_up
    kept = decide(strategy, RestartHistory((0.0,)), 10.001)
    assert (kept.give_up, kept.history.failures) == (False, (10.001,)), "the old one left the window"


def test_strategies_by_name_and_bad_options_are_named() -> None:
    assert (
        restart_strategy("fixed-delay", attempts=1, delay_s=0.1).describe()
        == "fixed delay: 1 restarts, 0.1 s apart"
    )
    with pytest.raises(ValueError, match="'sometimes' is not one of none, fixed-delay"):
        restart_strategy("sometimes")
    with pytest.raises(ValueError, match="fixed-delay needs attempts >= 0"):
        restart_strategy("fixed-delay", attempts=-1)
    with pytest.raises(ValueError, match="failure-rate needs an interval > 0"):
        restart_strategy("failure-rate", failure_interval_s=0.0)
