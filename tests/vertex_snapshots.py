"""Snapshot and restore every subtask of a vertex that lives in this process.

The engine snapshots subtasks in their own tasks and a coordinator writes
`_metadata`; this module does the same for subtasks held in one process, for
tests of the state layer, the state demo and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.runtime.clock import SystemClock
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.metadata import (
    CheckpointMetadata,
    SnapshotKind,
    VertexState,
    read_metadata,
    write_metadata,
)
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, restore_subtask, snapshot_subtask
from lockgate.runtime.state.operator_state import OperatorStateStore


@dataclass
class LocalSubtask:
    """The state of one subtask: keyed backend (with its snapshot strategies), operator state."""

    keyed: CheckpointableKeyedStateBackend | None
    operator: OperatorStateStore | None = None


def snapshot_vertex(
    storage: CheckpointStorage,
    snapshot_dir: str,
    metadata: tuple[str, int, SnapshotKind],
    vertex: str,
    subtasks: list[LocalSubtask],
) -> CheckpointMetadata:
    """Snapshot `subtasks` (subtask i at index i) into `snapshot_dir` and complete it.

    `metadata` is (job id, checkpoint id, kind); savepoints are always canonical.
    """
    job_id, checkpoint_id, kind = metadata
    pending = [
        snapshot_subtask(
            SnapshotTarget(storage, snapshot_dir, vertex, index),
            checkpoint_id,
            kind,
            subtask.keyed,
            subtask.operator,
        )
        for index, subtask in enumerate(subtasks)
    ]
    states = tuple(p.complete() for p in pending)
    max_parallelism = next((s.keyed.max_parallelism for s in subtasks if s.keyed is not None), len(subtasks))
    result = CheckpointMetadata(
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        kind=kind,
        timestamp_ms=SystemClock().now_ms(),
        vertices={vertex: VertexState(len(subtasks), max_parallelism, states)},
    )
    write_metadata(storage, snapshot_dir, result, None)  # in one process: nothing crosses a trust line
    for subtask in subtasks:
        if subtask.keyed is not None and kind == "checkpoint":
            subtask.keyed.notify_checkpoint_complete(checkpoint_id)
    return result


def restore_vertex(
    storage: CheckpointStorage, snapshot_dir: str, vertex: str, subtasks: list[LocalSubtask]
) -> CheckpointMetadata:
    """Restore `subtasks` (any number, subtask i at index i) from a complete snapshot."""
    metadata = read_metadata(storage, snapshot_dir)
    for index, subtask in enumerate(subtasks):
        restore_subtask(
            storage,
            snapshot_dir,
            metadata,
            vertex=vertex,
            parallelism=len(subtasks),
            index=index,
            keyed=subtask.keyed,
            operator=subtask.operator,
        )
    return metadata
