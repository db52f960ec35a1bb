"""The Flink Kubernetes Operator autoscaler's default algorithm (FLIP-271), applied
to a Lockgate series: what its defaults would have decided on the same metrics,
the baseline the autoscaler is measured against.

Its defaults, from the operator's configuration reference: target utilization
0.7 with a boundary of 0.3 (no rescale while a vertex's processing capacity is
within [target rate / 1.0, target rate / 0.4]), catch-up duration 30 min,
restart time 5 min, metrics window 15 min, stabilization interval 5 min,
scale-down at most by a factor 0.6 of the parallelism at once, scale-up
unbounded (factor 100000), no scale-down within 1 h of a scale-up (its
scale-up grace period), busy time aggregated by the busiest subtask (MAX),
parallelism between 1 and 200, rounded up to a divisor of the key groups
(partitions for a source) up to half of them.

Flink scales each vertex on its own; a Lockgate job has one parallelism, so
here it takes the largest any vertex would get, and scales down only when every
vertex would.
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
    scale_up_grace_s: float = 3600.0
    max_scale_down_factor: float = 0.6
    max_scale_up_factor: float = 100_000.0


@dataclass(frozen=True)
class FlinkState:
    parallelism: int
    since_s: float
    """When the running parallelism took effect."""
    scaled_up_s: float | None = None
    """When the last scale-up took effect."""


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
        decision = Decision(
            now_s, "scale-up", wanted, f"scale up {running} -> {wanted}", ScalingState(wanted, now_s)
        )
        return decision, FlinkState(wanted, now_s, now_s)
    if wanted < running:
        if state.scaled_up_s is not None and now_s - state.scaled_up_s < policy.scale_up_grace_s:
            return Decision(
                now_s, "hold", running, f"{wanted} would do; within the scale-up grace period", held
            ), state
        decision = Decision(
            now_s, "scale-down", wanted, f"scale down {running} -> {wanted}", ScalingState(wanted, now_s)
        )
        return decision, FlinkState(wanted, now_s, state.scaled_up_s)
    return Decision(now_s, "hold", running, f"hold at {running}", held), state


def _vertex_parallelism(chain: ChainRates, load: WindowLoad, policy: FlinkDefaults, running: int) -> int:
    """What Flink would give this vertex: its running parallelism while its capacity
    is within the utilization boundary of its target rate."""
    if chain.max_busy <= 0 or load.read_rate <= 0:
        return running if chain.records_per_s > 0 else policy.min_parallelism
    capacity = chain.records_per_s / chain.max_busy  # the vertex, its busiest subtask never waiting
    share = chain.records_per_s / load.read_rate
    backlog = load.backlog or 0
    target = share * (load.input_rate + (backlog + load.input_rate * policy.restart_s) / policy.catch_up_s)
    low = target / (policy.target_utilization + policy.utilization_boundary)
    high = target / max(policy.target_utilization - policy.utilization_boundary, 1e-9)
    if low <= capacity <= high:
        return running
    factor = (target / policy.target_utilization) / capacity
    factor = min(max(factor, 1 - policy.max_scale_down_factor), policy.max_scale_up_factor)
    ceiling = min(policy.max_parallelism, policy.key_groups)
    parallelism = min(ceiling, max(policy.min_parallelism, math.ceil(running * factor - 1e-9)))
    count = policy.kafka_partitions if chain.source and policy.kafka_partitions else policy.key_groups
    for candidate in range(parallelism, min(ceiling, count // 2) + 1):
        if count % candidate == 0:
            return candidate
    return parallelism
