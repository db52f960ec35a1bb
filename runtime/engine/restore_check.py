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

from lockgate.runtime.api.front_ends import (
    ALLOW_NON_RESTORED_STATE,
    MAX_PARALLELISM,
    FrontEnd,
    FrontEndError,
    snapshot_named,
)
from lockgate.runtime.api.graph import KEYED_KINDS, STATEFUL_KINDS, JobGraph
from lockgate.runtime.failure_class import FailureClass
from lockgate.runtime.snapshot.metadata import CheckpointMetadata

log = logging.getLogger(__name__)

CLAIMS = {"keyed": KEYED_KINDS, "operator": ("source", "sink")}
"""Which kinds of vertex keep each kind of state."""


class MaxParallelismMismatchError(FrontEndError, ValueError):
    """State is split into key groups by max parallelism: it can never change.
    `parallelism` is set when the run's parallelism exceeds the state's max parallelism
    (the run's own max parallelism follows from it unless set), else the run's
    `max_parallelism` differs from the state's."""

    def __init__(
        self, url: str, vertex: str, state_max_parallelism: int, max_parallelism: int, parallelism: int | None
    ) -> None:
        super().__init__(url, vertex, state_max_parallelism, max_parallelism, parallelism)
        self.url, self.vertex = url, vertex
        self.state_max_parallelism, self.max_parallelism = state_max_parallelism, max_parallelism
        self.parallelism = parallelism

    def render(self, front_end: FrontEnd) -> str:
        snapshot, fixed = snapshot_named(self.url, front_end), self.state_max_parallelism
        if self.parallelism is not None:
            return (
                f"parallelism {self.parallelism} exceeds max parallelism {fixed} of the state in {snapshot} "
                f"(vertex {self.vertex!r}), which is fixed for the life of a job's state: a subtask needs "
                f"at least one key group; run with at most {fixed}"
            )
        return (
            f"{snapshot} was taken with max parallelism {fixed} (vertex {self.vertex!r}); this run has "
            f"{self.max_parallelism}. Run with {MAX_PARALLELISM.set_to(fixed, front_end)}: it is fixed for "
            "the life of a job's state."
        )

    failure_class = FailureClass.RESTORE


class NonRestoredStateError(FrontEndError, ValueError):
    """The snapshot holds state no vertex of the job claims; the message names it."""

    failure_class = FailureClass.RESTORE

    def __init__(self, url: str, unclaimed: list[str], stateful: list[str]) -> None:
        super().__init__(url, unclaimed, stateful)
        self.url, self.unclaimed, self.stateful = url, unclaimed, stateful

    def render(self, front_end: FrontEnd) -> str:
        return (
            f"{snapshot_named(self.url, front_end)} holds state no vertex of this job claims: "
            f"{', '.join(self.unclaimed)}. The job's stateful vertices are {', '.join(self.stateful)}. "
            "A vertex keeps its state under its name: give a renamed vertex its old name back to restore "
            "its state (a renamed source would otherwise read its input again from the beginning), or pass "
            f"{ALLOW_NON_RESTORED_STATE.set_to(True, front_end)} to drop the unclaimed state."
        )


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
            raise MaxParallelismMismatchError(url, name, vertex.max_parallelism, max_parallelism, parallelism)
        if vertex.max_parallelism != max_parallelism:
            raise MaxParallelismMismatchError(url, name, vertex.max_parallelism, max_parallelism, None)
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
    stateful = [f"{v.name!r} ({v.kind})" for v in graph.vertices if v.kind in STATEFUL_KINDS]
    raise NonRestoredStateError(url, unclaimed, stateful)
