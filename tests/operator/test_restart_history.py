"""The operator's restart history for lost drivers lives in the StreamingJob's
status; it reads what earlier operators wrote."""

from __future__ import annotations

from lockgate.operator.reconcile import restart_history
from lockgate.runtime.engine.restart import RestartHistory, decide, restart_strategy


def test_failure_times_in_status_are_the_history() -> None:
    assert restart_history({"driverFailureTimes": [10, 20.5]}) == RestartHistory((10.0, 20.5))
    assert restart_history({}) == RestartHistory(), "no failure yet"


def test_a_status_that_kept_only_a_count_counts_each_restart_as_long_ago() -> None:
    """Written by an operator that kept times only for failure-rate."""
    history = restart_history({"driverRestarts": 2})
    fixed = restart_strategy("fixed-delay", attempts=3)
    assert decide(fixed, history, 1e9).delay_s == 1.0, "the third of three"
    assert decide(fixed, decide(fixed, history, 1e9).history, 1e9 + 1).give_up
    backoff = restart_strategy("exponential-backoff")
    assert decide(backoff, history, 1e9).delay_s == 1.0, "long ago: the backoff starts over"
