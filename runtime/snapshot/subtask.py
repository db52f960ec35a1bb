"""Snapshot and restore of one subtask's keyed and operator state.

`snapshot_subtask` runs the synchronous part at once and returns a
`PendingSubtaskSnapshot` whose `complete()` (the asynchronous part, usually
on another thread) writes the files and returns the handles for `_metadata`.
State may change meanwhile: the files reflect the synchronous instant.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend, RestoreError
from lockgate.runtime.snapshot.handles import OperatorStateHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SnapshotKind, SubtaskState
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.strategy import KeyedUpload
from lockgate.runtime.state.operator_state import OperatorStateSnapshot, OperatorStateStore, redistribute


@dataclass(frozen=True)
class SnapshotTarget:
    storage: CheckpointStorage
    snapshot_dir: str
    vertex: str
    subtask: int

    @property
    def subtask_path(self) -> str:
        return f"{self.vertex}/{self.subtask}"


class PendingSubtaskSnapshot:
    def __init__(
        self, target: SnapshotTarget, keyed: KeyedUpload | None, operator: OperatorStateSnapshot | None
    ) -> None:
        self._target = target
        self._keyed = keyed
        self._operator = operator

    def complete(self) -> SubtaskState:
        target = self._target
        storage = target.storage
        keyed = None if self._keyed is None else self._keyed.run(storage)
        operator = None
        if self._operator is not None:
            path = posixpath.join(target.snapshot_dir, target.subtask_path, "operator")
            ref = storage.write_file(path, self._operator.encode(), target.snapshot_dir)
            operator = OperatorStateHandle(ref)
        return SubtaskState(target.subtask, keyed, operator)

    def cancel(self) -> None:
        if self._keyed is not None:
            self._keyed.cancel()


def snapshot_subtask(
    target: SnapshotTarget,
    checkpoint_id: int,
    kind: SnapshotKind,
    keyed: CheckpointableKeyedStateBackend | None,
    operator: OperatorStateStore | None,
) -> PendingSubtaskSnapshot:
    """Take the synchronous part now, the keyed state by the strategy its backend
    keeps for `kind` (savepoints are always canonical). First, a bounded share of
    the expired TTL entries is deleted, so that entries nobody reads again do not
    stay in the backend and in every incremental snapshot."""
    upload = None
    if keyed is not None:
        keyed.drop_expired()
        strategy = keyed.snapshot_strategy(kind)
        upload = strategy.snapshot(checkpoint_id, target.snapshot_dir, target.subtask_path)
    return PendingSubtaskSnapshot(target, upload, None if operator is None else operator.snapshot())


def restore_subtask(
    storage: CheckpointStorage,
    snapshot_dir: str,
    metadata: CheckpointMetadata,
    *,
    vertex: str,
    parallelism: int,
    index: int,
    keyed: CheckpointableKeyedStateBackend | None,
    operator: OperatorStateStore | None,
) -> None:
    """Restore subtask `index` of `parallelism` of `vertex` from a complete snapshot."""
    state = metadata.vertices.get(vertex)
    if state is None:
        return  # a vertex new to this job starts empty
    if keyed is not None and keyed.max_parallelism != state.max_parallelism:
        raise RestoreError(
            f"vertex {vertex!r}: the snapshot was taken with max parallelism "
            f"{state.max_parallelism} but the job now has {keyed.max_parallelism}; max "
            "parallelism is fixed for the life of a job's state"
        )
    if parallelism > state.max_parallelism:
        raise RestoreError(
            f"vertex {vertex!r}: parallelism {parallelism} exceeds the snapshot's max "
            f"parallelism {state.max_parallelism}"
        )
    handles = [s.keyed for s in state.subtasks if s.keyed is not None]
    if handles and keyed is None:
        raise RestoreError(f"vertex {vertex!r} has keyed state in the snapshot but no keyed backend")
    if keyed is not None:
        keyed.restore(storage, snapshot_dir, handles)
    if operator is not None:
        old = [
            OperatorStateSnapshot.decode(storage.read_file(snapshot_dir, s.operator.file))
            for s in sorted(state.subtasks, key=lambda s: s.subtask)
            if s.operator is not None
        ]
        if old:
            operator.restore(redistribute(old, parallelism)[index])
