"""Whether a snapshot's state fits the job about to restore it.

Its max parallelism must be the job's: keyed state is split into that many key
groups for good. And every state in it must be claimed by a vertex of the job, by
name and by kind (keyed state by a process or window vertex, operator state by a source
or a sink): state nobody claims would be dropped without a word — a renamed source
would read its input again from the beginning. So it is refused, naming it, unless
the user allows it (Flink's `--allow-non-restored-state`); then it is dropped with
a warning, and each vertex new to the job starts empty.
"""

from __future__ import annotations

import logging

from lockgate.runtime.api.graph import KEYED_KINDS, STATEFUL_KINDS, JobGraph
from lockgate.runtime.failure_class import FailureClass
from lockgate.runtime.snapshot.metadata import CheckpointMetadata

log = logging.getLogger(__name__)

CLAIMS = {"keyed": KEYED_KINDS, "operator": ("source", "sink")}
"""Which kinds of vertex keep each kind of state."""


class MaxParallelismMismatchError(ValueError):
    """State is split into key groups by max parallelism: it can never change."""

    failure_class = FailureClass.RESTORE


class NonRestoredStateError(ValueError):
    """The snapshot holds state no vertex of the job claims; the message names it."""

    failure_class = FailureClass.RESTORE


def unclaimed_state(metadata: CheckpointMetadata, graph: JobGraph) -> list[str]:
    """Each state of the snapshot no vertex of `graph` claims, as `'name' (kind state)`."""
    kinds = {vertex.name: vertex.kind for vertex in graph.vertices}
    return [
        f"{name!r} ({kind} state)"
        for name, state in sorted(metadata.vertices.items())
        for kind, claimants in CLAIMS.items()
        if kinds.get(name) not in claimants
        and any(getattr(subtask, kind) is not None for subtask in state.subtasks)
    ]


def check_restorable(
    url: str,
    metadata: CheckpointMetadata,
    graph: JobGraph,
    max_parallelism: int,
    *,
    allow_non_restored_state: bool,
    parallelism: int | None = None,
) -> None:
    """Refuse to restore `metadata` into `graph` where its state cannot go. `parallelism`,
    the run's, is checked first against the state's max parallelism: a run's own max
    parallelism follows from its parallelism unless set, so that is the flag to change."""
    for name, vertex in metadata.vertices.items():
        if parallelism is not None and parallelism > vertex.max_parallelism:
            raise MaxParallelismMismatchError(
                f"parallelism {parallelism} exceeds max parallelism {vertex.max_parallelism} of the "
                f"state in {url} (vertex {name!r}), which is fixed for the life of a job's state: a "
                f"subtask needs at least one key group; run with at most {vertex.max_parallelism}"
            )
        if vertex.max_parallelism != max_parallelism:
            raise MaxParallelismMismatchError(
                f"{url} was taken with max parallelism {vertex.max_parallelism} (vertex {name!r}); "
                f"this run has {max_parallelism}. Run with --max-parallelism "
                f"{vertex.max_parallelism}: it is fixed for the life of a job's state."
            )
    unclaimed = unclaimed_state(metadata, graph)
    if not unclaimed:
        return
    if allow_non_restored_state:
        log.warning(
            "restoring %s without the state no vertex of the job claims, which is dropped: %s",
            url,
            ", ".join(unclaimed),
        )
        return
    stateful = ", ".join(f"{v.name!r} ({v.kind})" for v in graph.vertices if v.kind in STATEFUL_KINDS)
    raise NonRestoredStateError(
        f"{url} holds state no vertex of this job claims: {', '.join(unclaimed)}. The job's "
        f"stateful vertices are {stateful}. A vertex keeps its state under its name: "
        "give a renamed vertex its old name back to restore its state (a renamed source would "
        "otherwise read its input again from the beginning), or pass --allow-non-restored-state "
        "(spec.job.allowNonRestoredState: true) to drop the unclaimed state."
    )
