"""Snapshot and restore of one subtask's keyed and operator state.

`snapshot_subtask` runs the synchronous part at once and returns a
`PendingSubtaskSnapshot` whose `complete()` (the asynchronous part, usually
on another thread) writes the files and returns the handles for `_metadata`.
State may change meanwhile: the files reflect the synchronous instant.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from lockgate.runtime.snapshot.canonical import (
    FrozenKeyedState,
    restore_canonical,
    write_canonical,
)
from lockgate.runtime.snapshot.handles import (
    CanonicalKeyedHandle,
    KeyedStateHandle,
    NativeKeyedHandle,
    OperatorStateHandle,
)
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SubtaskState
from lockgate.runtime.snapshot.native import NativeSnapshotStrategy, NativeUpload, restore_native
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import KeyedStateBackend
from lockgate.runtime.state.operator_state import (
    OperatorStateSnapshot,
    OperatorStateStore,
    redistribute,
)
from lockgate.runtime.state.rocksdb import RocksDBKeyedStateBackend


class RestoreError(ValueError):
    """A snapshot cannot be restored into this job as configured."""


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
        self,
        target: SnapshotTarget,
        keyed: KeyedStateBackend | None,
        native: NativeUpload | None,
        operator: OperatorStateSnapshot | None,
    ) -> None:
        self._target = target
        self._native = native
        self._operator = operator
        self._canonical: FrozenKeyedState | None = None
        if keyed is not None and native is None:
            self._canonical = FrozenKeyedState.of(keyed)

    def complete(self) -> SubtaskState:
        target = self._target
        storage = target.storage
        keyed: KeyedStateHandle | None = None
        if self._native is not None:
            keyed = self._native.run(storage)
        elif self._canonical is not None:
            path = posixpath.join(target.snapshot_dir, target.subtask_path, "keyed")
            try:
                keyed = write_canonical(storage, path, target.snapshot_dir, self._canonical)
            finally:
                self._canonical.release()
        operator = None
        if self._operator is not None:
            path = posixpath.join(target.snapshot_dir, target.subtask_path, "operator")
            ref = storage.write_file(path, self._operator.encode(), target.snapshot_dir)
            operator = OperatorStateHandle(ref)
        return SubtaskState(target.subtask, keyed, operator)

    def cancel(self) -> None:
        if self._native is not None:
            self._native.cancel()
        if self._canonical is not None:
            self._canonical.release()


def snapshot_subtask(
    target: SnapshotTarget,
    checkpoint_id: int,
    keyed: KeyedStateBackend | None,
    operator: OperatorStateStore | None,
    native: NativeSnapshotStrategy | None = None,
) -> PendingSubtaskSnapshot:
    """Take the synchronous part now. `native` selects an incremental RocksDB
    snapshot; without it the canonical format is written (always for savepoints).
    First, a bounded share of the expired TTL entries is deleted, so that entries
    nobody reads again do not stay in the backend and in every native snapshot."""
    if keyed is not None:
        keyed.drop_expired()
    upload = None
    if native is not None:
        if native.backend is not keyed:
            raise ValueError("the native snapshot strategy belongs to another backend")
        upload = native.snapshot(checkpoint_id, target.snapshot_dir, target.subtask_path)
    op_snapshot = operator.snapshot() if operator is not None else None
    return PendingSubtaskSnapshot(target, keyed, upload, op_snapshot)


def restore_keyed(
    storage: CheckpointStorage,
    snapshot_dir: str,
    handles: list[KeyedStateHandle],
    backend: KeyedStateBackend,
    native: NativeSnapshotStrategy | None = None,
) -> None:
    natives = [h for h in handles if isinstance(h, NativeKeyedHandle)]
    if natives:
        if not isinstance(backend, RocksDBKeyedStateBackend):
            raise RestoreError(
                f"this snapshot holds native RocksDB state, which the {backend.kind} backend "
                "cannot read; restore it with the rocksdb backend, or take a savepoint "
                "(canonical format) to switch backends"
            )
        restore_native(storage, snapshot_dir, natives, backend, native)
    for handle in handles:
        if isinstance(handle, CanonicalKeyedHandle):
            restore_canonical(storage, snapshot_dir, handle, backend)


def restore_subtask(
    storage: CheckpointStorage,
    snapshot_dir: str,
    metadata: CheckpointMetadata,
    *,
    vertex: str,
    parallelism: int,
    index: int,
    keyed: KeyedStateBackend | None,
    operator: OperatorStateStore | None,
    native: NativeSnapshotStrategy | None = None,
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
        restore_keyed(storage, snapshot_dir, handles, keyed, native)
    if operator is not None:
        old = [
            OperatorStateSnapshot.decode(storage.read_file(snapshot_dir, s.operator.file))
            for s in sorted(state.subtasks, key=lambda s: s.subtask)
            if s.operator is not None
        ]
        if old:
            operator.restore(redistribute(old, parallelism)[index])
