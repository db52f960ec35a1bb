"""The Flink Kubernetes Operator autoscaler's default algorithm (FLIP-271), applied
to a Lockgate series: what its defaults would have decided on the same metrics,
the baseline the autoscaler is measured against.

Its defaults (`AutoScalerOptions`): target utilization 0.7 with a boundary of
0.3, catch-up duration 30 min, restart time 5 min, metrics window 15 min,
stabilization interval 5 min, scale-down delayed by an interval of 1 h (to the
highest parallelism recommended within it), scale-down by at most a factor 0.6
of the parallelism at once, scale-up unbounded (factor 100000), busy time of
the busiest subtask (MAX), parallelism from 1 to 200, rounded up to a divisor
of the key groups (a source's partitions) up to half of them. Its formulas
(`AutoScalerUtils.getTargetProcessingCapacity`,
`ScalingMetricEvaluator.computeProcessingRateThresholds`), per vertex of
capacity C (records in ÷ busiest subtask's busy fraction), input rate I (its
share of the sources' read rate plus lag growth) and lag L:

- target capacity = L ÷ catch-up + I * restart ÷ catch-up + I ÷ 0.7;
- no rescale while C lies within [L ÷ catch-up + I ÷ 1.0, L ÷ catch-up +
  I * restart ÷ catch-up + I ÷ 0.4]; while L is more than 5 min of input
  ("processing backlog") the bounds are 1.0 and 0 (no scale-down);
- else parallelism * target capacity ÷ C, rounded up.

Flink scales each vertex on its own; a Lockgate job has one parallelism, so
here it takes the largest any vertex would get. A vertex within its bounds, or
a scale-up, clears a delayed scale-down (our reading of `DelayedScaleDown`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.runtime.autoscaling.decision import Decision, ScalingState
from lockgate.runtime.autoscaling.series import (
    ChainRates,
    IncompleteMetricsError,
    LoadSample,
    WindowLoad,
    measure,
)


@dataclass(frozen=True)
class FlinkDefaults:
    """The operator's `job.autoscaler.*` defaults (times in seconds)."""

    key_groups: int = 128
    kafka_partitions: int | None = None
    min_parallelism: int = 1
    max_parallelism: int = 200
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    catch_up_s: float = 1800.0
    restart_s: float = 300.0
    window_s: float = 900.0
    stabilization_s: float = 300.0
    scale_down_interval_s: float = 3600.0
    backlog_threshold_s: float = 300.0
    max_scale_down_factor: float = 0.6
    max_scale_up_factor: float = 100_000.0


@dataclass(frozen=True)
class FlinkState:
    parallelism: int
    since_s: float
    """When the running parallelism took effect."""
    scale_down_since_s: float | None = None
    """When a delayed scale-down was first recommended."""
    recommended: tuple[tuple[float, int], ...] = ()
    """The scale-down recommendations since then."""


def flink_decide(
    series: Sequence[LoadSample], policy: FlinkDefaults, state: FlinkState, now_s: float
) -> tuple[Decision, FlinkState]:
    """Its decision at `now_s`, and the state its next decision starts from."""
    running = state.parallelism
    held = ScalingState(running, state.since_s)
    try:
        load = measure(
            series,
            parallelism=running,
            since_s=state.since_s + policy.stabilization_s,
            window_s=policy.window_s,
            now_s=now_s,
        )
    except IncompleteMetricsError as missing:
        return Decision(now_s, "not-taken", running, f"metrics incomplete: {missing}", held), state
    wanted = max((_vertex_parallelism(c, load, policy, running) for c in load.chains), default=running)
    if wanted > running:
        up = Decision(
            now_s, "scale-up", wanted, f"scale up {running} -> {wanted}", ScalingState(wanted, now_s)
        )
        return up, FlinkState(wanted, now_s)
    if wanted == running:
        return Decision(now_s, "hold", running, f"hold at {running}", held), FlinkState(
            running, state.since_s
        )
    first = state.scale_down_since_s if state.scale_down_since_s is not None else now_s
    recent = tuple(
        (at, p)
        for at, p in (*state.recommended, (now_s, wanted))
        if at >= now_s - policy.scale_down_interval_s
    )
    if now_s - first < policy.scale_down_interval_s:
        reason = f"{wanted} would do; scale-down delayed from {first:g} s"
        return Decision(now_s, "hold", running, reason, held), FlinkState(
            running, state.since_s, first, recent
        )
    lower = max(p for _, p in recent)
    down = Decision(
        now_s, "scale-down", lower, f"scale down {running} -> {lower}", ScalingState(lower, now_s)
    )
    return down, FlinkState(lower, now_s)


def _vertex_parallelism(chain: ChainRates, load: WindowLoad, policy: FlinkDefaults, running: int) -> int:
    """What Flink would give this vertex: its running parallelism while its capacity
    is within the bounds of its target rate."""
    if chain.max_busy <= 0 or load.read_rate <= 0:
        return running if chain.records_per_s > 0 else policy.min_parallelism
    capacity = chain.records_per_s / chain.max_busy  # the vertex, its busiest subtask never waiting
    share = chain.records_per_s / load.read_rate
    lag = share * (load.backlog or 0)
    rate = share * load.input_rate
    catch_up = lag / policy.catch_up_s
    restart = rate * policy.restart_s / policy.catch_up_s
    if lag > rate * policy.backlog_threshold_s:  # processing backlog
        upper, lower = 1.0, 0.0
    else:
        upper = policy.target_utilization + policy.utilization_boundary
        lower = policy.target_utilization - policy.utilization_boundary
    scale_up_below = catch_up + rate / min(upper, 1.0)
    scale_down_above = math.inf if lower <= 0 else catch_up + restart + rate / lower
    if scale_up_below <= capacity <= scale_down_above:
        return running
    target = catch_up + restart + rate / policy.target_utilization
    factor = min(max(target / capacity, 1 - policy.max_scale_down_factor), 1 + policy.max_scale_up_factor)
    ceiling = min(policy.max_parallelism, policy.key_groups)
    parallelism = min(ceiling, max(policy.min_parallelism, math.ceil(running * factor - 1e-9)))
    count = policy.kafka_partitions if chain.source and policy.kafka_partitions else policy.key_groups
    for candidate in range(parallelism, min(ceiling, count // 2) + 1):
        if count % candidate == 0:
            return candidate
    return parallelism
