"""The autoscaler's decision on recorded series (load_model.py: a job whose keyed
chain processes 1000 records per busy second per subtask): it scales up once to
what keeps up, drains the backlog within the catch-up duration, scales down once
after the delay, never flaps, and takes no decision on incomplete metrics."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from lockgate.runtime.autoscaling.decision import (
    Decision,
    ScalingPolicy,
    ScalingState,
    decide,
    even_split,
)
from lockgate.runtime.autoscaling.series import LoadSample, SubtaskLoad
from lockgate.runtime.autoscaling.status import AutoscalerStatus

from tests.runtime.autoscaling.load_model import KEYED_RATE, simulate

POLICY = ScalingPolicy(
    max_parallelism=32, window_s=60, stabilization_s=30, scale_down_delay_s=600, catch_up_s=300
)


class Autoscaler:
    """`decide`, each call handed the state the last one returned."""

    def __init__(self, policy: ScalingPolicy, parallelism: int) -> None:
        self.policy = policy
        self.state = ScalingState(parallelism, 0.0)

    def __call__(self, samples: list[LoadSample], now_s: float) -> Decision:
        decision = decide(samples, self.policy, self.state, now_s)
        self.state = decision.state
        return decision


def test_three_times_the_load_of_one_subtask_scales_up_once_to_what_keeps_up() -> None:
    run = simulate(lambda t: 3000.0, Autoscaler(POLICY, 1), parallelism=1, until_s=3600)
    assert run.actions() == ["scale-up"], [d.reason for d in run.rescales]
    up = run.rescales[0]
    assert up.at_s == POLICY.stabilization_s + POLICY.window_s, "at the first full window"
    assert up.parallelism * KEYED_RATE * POLICY.target_utilization >= 3000.0, "keeps up at the target"
    assert up.sizing is not None
    assert up.sizing.load.input_rate == pytest.approx(3000.0, rel=0.01), "read rate plus backlog growth"
    assert up.parallelism == math.ceil(up.sizing.target_rate / (KEYED_RATE * 0.7)), "the smallest that does"
    assert run.backlog[-1] == 0.0
    assert "scale up 1 -> 6" in up.reason
    assert "keyed needs 6" in up.reason


def test_a_load_step_scales_up_once_for_the_new_load_not_a_step_per_window() -> None:
    """500 records/s for 10 min, then 3000: the first windows after the step hold
    part of the new load only. The scale-up waits (a window at most) until the
    window's second half is no longer rising above the whole, then goes to what
    keeps up with the new load and its backlog, once."""
    run = simulate(lambda t: 500.0 if t < 600 else 3000.0, Autoscaler(POLICY, 1), parallelism=1, until_s=1800)
    assert run.actions() == ["scale-up"], [d.reason for d in run.rescales]
    (up,) = run.rescales
    assert up.parallelism * KEYED_RATE * POLICY.target_utilization >= 3000.0, up.reason
    assert 600 < up.at_s <= 600 + POLICY.window_s + 5, "within a window of the step"
    waited = [d.reason for d in run.decisions if "the input is still rising" in d.reason]
    assert waited, "the first window after the step would have sized for less"
    assert run.backlog[-1] == 0.0
    inputs = AutoscalerStatus.of(up, POLICY, 1, 0, ()).to_json()["inputs"]
    assert up.sizing is not None
    assert inputs["inputRate"] == round(up.sizing.input_rate, 3), "the status shows the rate it sized for"
    assert inputs["ratesOf"] is None


SCENARIO = ScalingPolicy(  # test_autoscaling_on_kafka.py's
    max_parallelism=8,
    key_groups=32,
    window_s=3.0,
    stabilization_s=1.5,
    catch_up_s=10.0,
    scale_down_delay_s=5.0,
)

RECORDED_ON_TANSU = [
    # seconds, source: records read, busy s, backpressured s, backlog; sum: records in, busy s
    (1.005, 49, 0.097, 0.526, 12, 21, 0.941),
    (2.005, 65, 0.246, 1.378, 6, 43, 1.941),
    (3.006, 95, 0.246, 2.382, 52, 63, 2.942),
    (4.006, 103, 0.441, 3.184, 28, 79, 3.943),
    (5.007, 127, 0.441, 4.387, 124, 103, 4.943),
]
"""The suite's Kafka scenario at P = 1 (60 records/s offered, 20 a subtask), as its
autoscaler sampled it: at 4 s the source's backlog reads 28, its end of input
(records read plus backlog) 131 where it was 147 a second before: a high
watermark older than the records read beside it."""


def _recorded(until_s: float) -> list[LoadSample]:
    return [
        LoadSample(
            at_s,
            1,
            (
                SubtaskLoad("numbers", 0, read, busy, blocked, True, backlog, 4),
                SubtaskLoad("sum", 0, summed, summed_busy),
            ),
        )
        for at_s, read, busy, blocked, backlog, summed, summed_busy in RECORDED_ON_TANSU
        if at_s <= until_s
    ]


def test_a_window_ending_on_a_stale_backlog_takes_no_decision() -> None:
    """Sized on [1, 4] s the input reads 23 records/s (backlog growth 5/s) of 60: the
    sum would need 3 (4 with the even split) where it needs 6, and a second step up
    would follow. The next window, fresh at both ends, sizes for the load it has."""
    state = ScalingState(1, -0.6)  # the launch seen 1.6 s before the first sample
    stale = decide(_recorded(4.1), SCENARIO, state, 4.1)
    assert stale.action == "not-taken", stale.reason
    assert "the backlog of numbers/0 at the window's end is stale" in stale.reason
    assert "records read plus backlog (131) fell below the 147 of 1 s before" in stale.reason
    fresh = decide(_recorded(5.1), SCENARIO, stale.state, 5.1)
    assert fresh.action == "scale-up", fresh.reason
    assert fresh.parallelism >= 5, fresh.reason


def test_records_in_flight_to_a_chain_do_not_shrink_its_share_of_the_target() -> None:
    """30 s at 10 records/s, then a step to 60 (the benchmark's profile): in the 3 s
    after it the source read 60 records, the sum took in 40 — 20 fill the buffers
    between them — though every record read reaches it. Sized by the window's
    ratio (0.67) the sum needs 4; by the launch's (340 of 360), 5."""

    def sample(at_s: float, read: int, backlog: int, summed: int, summed_busy: float) -> LoadSample:
        source = SubtaskLoad("numbers", 0, read, read / 500, at_s - read / 500, True, backlog, 4)
        return LoadSample(at_s, 1, (source, SubtaskLoad("sum", 0, summed, summed_busy)))

    series = [sample(30.0, 300, 0, 300, 15.0), sample(33.0, 360, 120, 340, 17.0)]
    up = decide(series, SCENARIO, ScalingState(1, 0.0), 33.0)
    assert up.action == "scale-up", up.reason
    assert up.sizing is not None
    assert up.sizing.load.input_rate == pytest.approx(60.0)
    assert up.parallelism >= 5, up.reason


def test_the_backlog_drains_within_the_catch_up_duration() -> None:
    run = simulate(lambda t: 3000.0, Autoscaler(POLICY, 1), parallelism=1, until_s=1200)
    up = run.rescales[0]
    assert up.sizing is not None
    assert up.sizing.load.backlog == pytest.approx(run.backlog[int(up.at_s) - 1], rel=0.01)
    drained_at = next(t for t in range(int(up.at_s), len(run.backlog)) if run.backlog[t] == 0)
    assert drained_at - up.at_s <= POLICY.catch_up_s, f"drained {drained_at - up.at_s} s after the scale-up"


def test_a_load_drop_scales_down_exactly_once_after_the_delay() -> None:
    drop_at = 1200
    run = simulate(
        lambda t: 3000.0 if t < drop_at else 800.0, Autoscaler(POLICY, 1), parallelism=1, until_s=4800
    )
    assert run.actions() == ["scale-up", "scale-down"], [d.reason for d in run.rescales]
    down = run.rescales[1]
    assert drop_at + POLICY.scale_down_delay_s <= down.at_s, "not before the delay"
    last_mixed_window = drop_at + POLICY.window_s
    assert down.at_s <= last_mixed_window + POLICY.scale_down_delay_s, "once the windows of 3000/s are gone"
    assert down.parallelism == 2, "800/s at 0.7 of 1000/s a subtask"
    assert "none above 2 in the last 600 s" in down.reason
    assert max(run.backlog[drop_at:]) <= 800.0 * 5, "behind by the rescale's pause at most"
    assert run.backlog[-1] == 0.0


def test_a_load_drop_scales_down_in_one_step_when_subtasks_share_cores() -> None:
    """Subtasks that share cores each do less as more run: here 1000 records per busy
    second at P = 1 and 1000 / (1 + 0.1 (P - 1)) at P (588 at 8), as tansu's
    scenario measured (19 at P = 1, 12-13 at P = 6). Sized by the rate measured at
    P = 8, 500 records/s would need 2; the job ran at 1 before the step, and what
    a subtask did there says 1 is enough: one step down, not 8 -> 2 -> 1."""

    def sharing(parallelism: int) -> float:
        return KEYED_RATE / (1 + 0.1 * (parallelism - 1))

    drop_at = 1800
    run = simulate(
        lambda t: 3000.0 if 600 <= t < drop_at else 500.0,
        Autoscaler(POLICY, 1),
        parallelism=1,
        until_s=4200,
        keyed_rate=sharing,
    )
    downs = [d for d in run.rescales if d.action == "scale-down"]
    assert [d.parallelism for d in downs] == [1], [d.reason for d in run.rescales]
    assert "at the rate a subtask did at 1" in downs[0].reason
    assert AutoscalerStatus.of(downs[0], POLICY, 8, 0, ()).to_json()["inputs"]["ratesOf"] == 1
    assert downs[0].at_s <= drop_at + POLICY.window_s + 2 * POLICY.scale_down_delay_s
    assert run.backlog[-1] == 0.0


WALL_CLOCK_S = 1_795_800_000.0
"""Where the driver's clock (wall time, seconds since the epoch) stands."""


def test_a_scale_down_under_way_says_how_long_it_has_waited_and_how_long_is_left() -> None:
    decider = Autoscaler(POLICY, 1)
    decider.state = ScalingState(1, WALL_CLOCK_S)

    def on_the_wall_clock(samples: list[LoadSample], now_s: float) -> Decision:
        shifted = [replace(sample, at_s=sample.at_s + WALL_CLOCK_S) for sample in samples]
        return decider(shifted, now_s + WALL_CLOCK_S)

    run = simulate(lambda t: 3000.0 if t < 1200 else 800.0, on_the_wall_clock, parallelism=1, until_s=2400)
    assert run.actions() == ["scale-up", "scale-down"], [d.reason for d in run.rescales]
    pending = [d for d in run.decisions if d.action == "hold" and "would do" in d.reason]
    first = pending[0].at_s
    later = next(d for d in pending if d.at_s == first + 100)
    assert "would do for 100 s, scale-down in 500 s;" in later.reason, later.reason
    down = run.rescales[1]
    waited = down.at_s - first
    assert f"every recommendation for the last {waited:g} s was lower, none above 2" in down.reason


def test_a_constant_load_never_rescales() -> None:
    """1800/s on 3 subtasks of 1000/s: 0.6 of them, inside the band (0.4 to 0.7)."""
    run = simulate(lambda t: 1800.0, Autoscaler(POLICY, 3), parallelism=3, until_s=4 * 3600, noise=0.2)
    assert run.rescales == []
    assert {d.action for d in run.decisions} == {"not-taken", "hold"}
    assert all(d.action == "hold" for d in run.decisions if d.at_s > 90), "once the window filled"


def test_noise_around_a_boundary_raises_the_job_at_most_once_and_never_lowers_it() -> None:
    """1400/s is exactly 0.7 of two subtasks: each window needs 2 or 3 (3 rounded
    up to 4, a divisor of the 128 key groups)."""
    for seed in range(5):
        run = simulate(
            lambda t: 1400.0, Autoscaler(POLICY, 2), parallelism=2, until_s=4 * 3600, noise=0.3, seed=seed
        )
        assert run.actions() in ([], ["scale-up"]), (seed, [d.reason for d in run.rescales])
        assert {d.recommended for d in run.decisions if d.recommended} <= {2, 4}, "it was near the boundary"


def test_a_missing_subtask_blocks_the_decision_and_says_which() -> None:
    def without_keyed_1(t: float, sample: LoadSample) -> LoadSample:
        if t < 200:
            return sample
        kept = tuple(s for s in sample.subtasks if (s.vertex, s.subtask) != ("keyed", 1))
        return replace(sample, subtasks=kept)

    run = simulate(lambda t: 3000.0, Autoscaler(POLICY, 2), parallelism=2, until_s=400, drop=without_keyed_1)
    assert run.rescales[0].at_s < 200, "scaled up while complete"
    later = [d for d in run.decisions if d.at_s >= 200 and d.state.parallelism == run.rescales[0].parallelism]
    assert later
    assert all(d.action == "not-taken" for d in later)
    assert "no metrics of keyed/1" in later[-1].reason


def test_a_short_window_blocks_the_decision() -> None:
    run = simulate(lambda t: 3000.0, Autoscaler(POLICY, 1), parallelism=1, until_s=85)
    assert run.rescales == []
    assert run.decisions[-1].action == "not-taken"
    assert "cover 55 s of the 60 s window" in run.decisions[-1].reason


def test_an_unknown_backlog_may_scale_up_on_busy_time_but_never_down_while_the_sources_are_busy() -> None:
    overloaded = simulate(
        lambda t: 3000.0, Autoscaler(POLICY, 1), parallelism=1, until_s=600, backlog_known=False
    )
    up = overloaded.rescales[0]
    assert up.action == "scale-up"
    assert up.sizing is not None
    assert up.sizing.busy_time_alone
    assert "unknown backlog (busy time alone)" in up.reason
    # Saturated at P = 8 (8000/s offered, 1000/s a subtask): the read rate says
    # less than arrives, so it must not be taken for the input rate.
    saturated = simulate(
        lambda t: 8000.0, Autoscaler(POLICY, 8), parallelism=8, until_s=900, backlog_known=False
    )
    assert all(d.action != "scale-down" for d in saturated.decisions)
    # Keeping up, the sources idle: what they read is what arrives.
    idle = simulate(lambda t: 500.0, Autoscaler(POLICY, 4), parallelism=4, until_s=1500, backlog_known=False)
    assert idle.actions() == ["scale-down"]
    assert idle.rescales[0].parallelism == 1


def test_the_new_parallelism_divides_key_groups_and_partitions_when_near() -> None:
    policy = ScalingPolicy(max_parallelism=200, key_groups=128)
    assert even_split(7, policy, 200) == 8, "8 divides 128, one more"
    assert even_split(13, policy, 200) == 16, "within a quarter more"
    assert even_split(11, policy, 200) == 11, "16 is more than a quarter away"
    kafka = replace(policy, kafka_partitions=12)
    assert even_split(3, kafka, 200) == 4, "divides both"
    assert even_split(5, kafka, 200) == 6, "the partitions first"
    assert even_split(7, kafka, 8) == 8, "then the key groups"
    assert even_split(7, kafka, 7) == 7, "never above the ceiling"


def test_the_policy_refuses_a_setting_naming_it() -> None:
    with pytest.raises(ValueError, match=r"target_utilization must be more than 0 and at most 1, got 1.5"):
        ScalingPolicy(max_parallelism=4, target_utilization=1.5)
    with pytest.raises(ValueError, match=r"max_parallelism must be at least min_parallelism \(3\), got 2"):
        ScalingPolicy(max_parallelism=2, min_parallelism=3)
    with pytest.raises(ValueError, match=r"scale_down_utilization .* less than target_utilization"):
        ScalingPolicy(max_parallelism=4, scale_down_utilization=0.8)


def test_an_unknown_backlog_holds_when_busy_time_needs_the_running_parallelism() -> None:
    """Sources never idle and no backlog to tell: no scale-down, but a hold is
    a decision busy time alone supports."""

    def sample(at_s: float, seconds: float) -> LoadSample:
        records = round(650 * seconds)
        return LoadSample(
            at_s,
            1,
            (
                SubtaskLoad("source", 0, records, 0.5 * seconds, 0.5 * seconds, True, None),
                SubtaskLoad("keyed", 0, records, 0.65 * seconds),
            ),
        )

    series = [sample(40.0, 40.0), sample(100.0, 100.0)]
    decision = decide(series, POLICY, ScalingState(1, 0.0), 100.0)
    assert decision.action == "hold", decision.reason
    assert "unknown backlog (busy time alone)" in decision.reason
