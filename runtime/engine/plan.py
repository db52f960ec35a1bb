"""Which vertices acknowledge checkpoints: those with state (sources, keyed vertices, sinks)."""

from __future__ import annotations

from lockgate.runtime.api.graph import STATEFUL_KINDS, JobGraph
from lockgate.runtime.coordination.coordinator import JobPlan


def job_plan(graph: JobGraph, parallelism: int, max_parallelism: int) -> JobPlan:
    return JobPlan(
        {v.name: parallelism for v in graph.vertices if v.kind in STATEFUL_KINDS},
        max_parallelism,
        frozenset(v.name for v in graph.vertices if v.kind == "source"),
    )
