"""The Flink Kubernetes Operator autoscaler's defaults on the same recorded series
as the decision's tests: the baseline for the benchmark. Its numbers follow from
its defaults (stabilization 5 min, window 15 min, catch-up 30 min, restart 5 min,
scale-down delayed 1 h and by at most a factor 0.6, rounding to a divisor of the
key groups)."""

from __future__ import annotations

from lockgate.runtime.autoscaling.decision import Decision
from lockgate.runtime.autoscaling.flink_reference import FlinkDefaults, FlinkState, flink_decide
from lockgate.runtime.autoscaling.series import LoadSample

from tests.runtime.autoscaling.load_model import simulate
from tests.runtime.autoscaling.test_decision import POLICY, Autoscaler


class FlinkAutoscaler:
    def __init__(self, parallelism: int) -> None:
        self.policy = FlinkDefaults()
        self.state = FlinkState(parallelism, 0.0)

    def __call__(self, samples: list[LoadSample], now_s: float) -> Decision:
        decision, self.state = flink_decide(samples, self.policy, self.state, now_s)
        return decision


def step(t: float) -> float:
    """3x what one subtask processes for 2 h, then 0.8x."""
    return 3000.0 if t < 7200 else 800.0


def test_on_a_load_step_flink_defaults_act_after_20_minutes_and_step_down_twice() -> None:
    flink = simulate(step, FlinkAutoscaler(1), parallelism=1, until_s=6 * 3600, kept_s=1300)
    assert [(d.action, d.parallelism) for d in flink.rescales] == [
        (
            "scale-up",
            8,
        ),  # (backlog / 1800 s + 3000 x 300 s / 1800 s + 3000 / 0.7) / 1000, to a divisor of 128
        ("scale-down", 4),  # no lower than 0.4 of 8 at once
        ("scale-down", 2),
    ]
    assert flink.rescales[0].at_s == 1200.0, "its 5 min stabilization and 15 min window"
    assert flink.rescales[2].at_s - flink.rescales[1].at_s >= 3600, "each scale-down delayed an hour"
    ours = simulate(step, Autoscaler(POLICY, 1), parallelism=1, until_s=6 * 3600)
    assert [(d.action, d.parallelism) for d in ours.rescales] == [("scale-up", 6), ("scale-down", 2)]
    assert ours.rescales[0].at_s == 90.0
    assert max(ours.backlog) < max(flink.backlog) / 10, "behind for 90 s instead of 20 min"


def test_flink_defaults_take_no_decision_on_an_unfilled_window() -> None:
    flink = simulate(lambda t: 3000.0, FlinkAutoscaler(1), parallelism=1, until_s=1195, kept_s=1300)
    assert flink.rescales == []
    assert "cover 895 s of the 900 s window" in flink.decisions[-1].reason
