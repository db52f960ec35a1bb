"""Sizing for key skew: a keyed chain's subtasks count their records per key
group, and the autoscaler sizes by the busiest subtask a parallelism would have,
not the mean one. Few keys over the key groups leave some subtasks with more
than their share: at 5 subtasks of 32 key groups, the 101 keys of the Kafka
scenario give one subtask 29 % of the records; sized as if even, that subtask is
the whole job's limit and the backlog drains at a fraction of the planned rate
(seen in CI: 16 s for a 10 s catch-up)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from lockgate.runtime.autoscaling.decision import ScalingPolicy, ScalingState, decide
from lockgate.runtime.autoscaling.series import (
    KEY_GROUP_SAMPLE,
    ChainRates,
    LoadSample,
    SubtaskLoad,
    measure,
)
from lockgate.runtime.autoscaling.status import AutoscalerStatus
from lockgate.runtime.keygroups import key_group, operator_index

KEY_GROUPS = 32
POLICY = ScalingPolicy(
    max_parallelism=16, key_groups=KEY_GROUPS, window_s=60, stabilization_s=0, catch_up_s=300
)
RATE = 20.0  # records a keyed subtask processes per busy second


def _per_key_group(keys: int, records_per_key: int) -> list[int]:
    """Records per key group when each of `keys` keys has `records_per_key`."""
    counts = [0] * KEY_GROUPS
    for key in range(keys):
        counts[key_group(key, KEY_GROUPS)] += records_per_key
    return counts


def _busiest_share(keys: int, parallelism: int) -> float:
    """The busiest subtask's share of `keys` equally loaded keys, counted key by key."""
    owners = Counter(operator_index(key_group(k, KEY_GROUPS), KEY_GROUPS, parallelism) for k in range(keys))
    return max(owners.values()) / keys


def _chain(chains: tuple[ChainRates, ...], vertex: str) -> ChainRates:
    return next(c for c in chains if c.vertex == vertex)


def _window(per_key_group: list[int], *, backlog: int, seconds: float = 60.0) -> list[LoadSample]:
    """Two samples `seconds` apart of a job at P = 1 whose keyed subtask took the
    records of `per_key_group` in that time at RATE a busy second (fully busy)."""
    records = sum(per_key_group)
    busy_s = records / RATE

    def sample(at_s: float, fraction: int) -> LoadSample:
        counts = tuple(c * fraction for c in per_key_group)
        return LoadSample(
            at_s,
            1,
            (
                SubtaskLoad("source", 0, records * fraction, 0.01 * fraction, 0.0, True, backlog, 4),
                SubtaskLoad(
                    "keyed", 0, records * fraction, busy_s * fraction, 0.0, False, None, None, 0, counts
                ),
            ),
        )

    return [sample(0.0, 0), sample(seconds, 1)]


def test_a_scale_up_passes_over_parallelisms_whose_busiest_subtask_takes_more_than_its_share() -> None:
    """101 keys, 60 records/s at 20 a subtask: spread evenly 5 subtasks would do at
    70 % (60 / 14 = 4.3); by key group the busiest of 5 takes 29 %, 17.4 records/s
    of its 14. The recommendation is the fewest whose busiest stays within 14/s."""
    per_second = 60
    counts = _per_key_group(101, 60 * per_second // 101 + 1)  # about 60/s for 60 s
    series = _window(counts, backlog=0)
    decision = decide(series, POLICY, ScalingState(1, -1.0), 60.0)

    assert decision.action == "scale-up", decision.reason
    assert decision.sizing is not None
    even = decision.sizing.target_rate / (RATE * POLICY.target_utilization)
    assert math.ceil(even) == 5, "as if the keys were spread evenly: 5"
    fitting = [p for p in range(5, 17) if even * _busiest_share(101, p) <= 1]
    assert decision.parallelism == fitting[0], (decision.reason, fitting)
    assert decision.parallelism > 5
    assert "its busiest subtask would take" in decision.reason, decision.reason


def test_keys_spread_evenly_over_the_key_groups_size_as_before() -> None:
    """Every key group equally loaded: no parallelism is passed over for skew (5
    subtasks own 7, 7, 6, 6 and 6 of the 32 key groups: the busiest takes 22 %, and
    4.3 subtasks' worth of records times 22 % is within one)."""
    counts = [113] * KEY_GROUPS  # 3616 records: 60/s
    decision = decide(_window(counts, backlog=0), POLICY, ScalingState(1, -1.0), 60.0)

    assert decision.sizing is not None
    even = decision.sizing.target_rate / (RATE * POLICY.target_utilization)
    assert decision.parallelism == math.ceil(even) == 5, decision.reason


def test_a_key_group_hotter_than_a_subtask_goes_to_the_fewest_that_isolate_it_and_says_so() -> None:
    """One key group with half the records: no parallelism keeps its subtask within
    the target. The recommendation is the fewest subtasks that give that key group
    as few neighbours as any, and the reason says what the busiest takes."""
    counts = [60] * KEY_GROUPS
    counts[7] = sum(counts)  # key group 7: half of the 64 records/s
    decision = decide(_window(counts, backlog=0), POLICY, ScalingState(1, -1.0), 60.0)

    assert decision.sizing is not None
    keyed = _chain(decision.sizing.load.chains, "keyed")
    least = min(keyed.busiest_share(p) for p in range(1, 17))
    assert least == pytest.approx((1920 + 60) / (31 * 60 + 1920)), "key group 7 and one other"
    assert decision.parallelism == min(p for p in range(1, 17) if keyed.busiest_share(p) == least)
    assert decision.parallelism == 12, "key groups 6 and 7 are subtask 2's of 12"
    assert "its busiest subtask would take 52% of its records" in decision.reason, decision.reason


def test_a_scale_down_is_held_while_the_busiest_subtask_is_used_above_the_scale_down_bound() -> None:
    """At P = 5 the mean subtask is 30 % used, under the 40 % below which the job
    would go down; the busiest (29 % of the records) is 43 %: it holds."""
    per_key_group = _per_key_group(101, 18)
    records = sum(per_key_group)
    seconds = 60.0  # 30 records/s
    owners = [operator_index(g, KEY_GROUPS, 5) for g in range(KEY_GROUPS)]

    def sample(at_s: float, fraction: int) -> LoadSample:
        subtasks = [SubtaskLoad("source", 0, records * fraction, 0.01, 0.0, True, 0, 4)]
        subtasks += [SubtaskLoad("source", i, 0, 0.0, 0.0, True, 0, 0) for i in range(1, 5)]
        for index in range(5):
            own = [g for g in range(KEY_GROUPS) if owners[g] == index]
            taken = sum(per_key_group[g] for g in own) * fraction
            counts = tuple(per_key_group[g] * fraction for g in own)
            subtasks.append(
                SubtaskLoad("keyed", index, taken, taken / RATE, 0.0, False, None, None, own[0], counts)
            )
        return LoadSample(at_s, 5, tuple(subtasks))

    series = [sample(0.0, 0), sample(seconds, 1)]
    decision = decide(series, POLICY, ScalingState(5, -1.0), seconds)

    assert decision.sizing is not None
    keyed = _chain(decision.sizing.load.chains, "keyed")
    assert keyed.busy == pytest.approx(0.3, abs=0.01), "the mean subtask"
    assert decision.sizing.utilization == pytest.approx(0.3 * 5 * _busiest_share(101, 5), abs=0.02)
    assert decision.sizing.utilization >= POLICY.scale_down_utilization
    assert decision.action == "hold", decision.reason
    assert decision.state.lower_since_s is None, "no scale-down pending"
    status = AutoscalerStatus.of(decision, POLICY, 5, 0, ())
    assert status.inputs is not None
    assert status.inputs["chains"]["keyed"]["busiestShare"] == pytest.approx(
        _busiest_share(101, 5), abs=0.001
    )


def test_a_window_of_few_records_sizes_by_the_launchs_counts_and_a_large_one_by_its_own() -> None:
    """Key-group counts of a window under KEY_GROUP_SAMPLE records say more of chance
    than of skew: the launch's counts since it started stand in for them."""

    def sample(at_s: float, counts: list[int]) -> LoadSample:
        total = sum(counts)
        return LoadSample(
            at_s,
            1,
            (
                SubtaskLoad("source", 0, total, 0.0, 0.0, True, 0),
                SubtaskLoad("keyed", 0, total, total / RATE, 0.0, False, None, None, 0, tuple(counts)),
            ),
        )

    launch = [1000] * KEY_GROUPS
    few = [c + (40 if g == 0 else 0) for g, c in enumerate(launch)]  # 40 records, all in key group 0
    load = measure([sample(0, launch), sample(60, few)], parallelism=1, since_s=0, window_s=60, now_s=60)
    assert _chain(load.chains, "keyed").key_group_records == tuple(few), "the launch's counts"

    many = [c + (KEY_GROUP_SAMPLE if g == 0 else 0) for g, c in enumerate(launch)]
    load = measure([sample(0, launch), sample(60, many)], parallelism=1, since_s=0, window_s=60, now_s=60)
    assert _chain(load.chains, "keyed").key_group_records == (KEY_GROUP_SAMPLE,) + (0,) * (KEY_GROUPS - 1), (
        "the window's"
    )


def test_key_group_counts_missing_from_a_subtask_size_as_if_even() -> None:
    """A subtask that owns more key groups than it counts publishes none: the chain
    has no key-group counts and is sized by its mean subtask, as DS2 does."""
    records = 3600
    series = [
        LoadSample(
            at_s,
            2,
            (
                SubtaskLoad("source", 0, round(records * f), 0.0, 0.0, True, 0),
                SubtaskLoad("source", 1, 0, 0.0, 0.0, True, 0),
                SubtaskLoad(
                    "keyed", 0, round(records * f), records * f / RATE, 0.0, False, None, None, 0, (1,) * 16
                ),
                SubtaskLoad("keyed", 1, 0, 0.0),
            ),
        )
        for at_s, f in ((0.0, 0), (60.0, 1))
    ]
    load = measure(series, parallelism=2, since_s=0, window_s=60, now_s=60)
    assert _chain(load.chains, "keyed").key_group_records is None
    assert _chain(load.chains, "keyed").busiest_share(4) == 0.25
