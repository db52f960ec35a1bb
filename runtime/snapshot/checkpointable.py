"""A keyed state backend together with the snapshot strategies it owns.

As in Flink, the backend decides how its state is checkpointed (the RocksDB
backend incrementally, from its SST files) and reads the snapshot handles a
restore gives it. Savepoints are always canonical: relocatable, and readable
by every backend.
"""

from __future__ import annotations

from abc import abstractmethod

from lockgate.runtime.snapshot.canonical import CanonicalSnapshotStrategy, restore_canonical
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle, KeyedStateHandle, NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import SnapshotKind
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.strategy import KeyedSnapshotStrategy
from lockgate.runtime.state.backend import KeyedStateBackend


class RestoreError(ValueError):
    """A snapshot cannot be restored into this job as configured."""


class CheckpointableKeyedStateBackend(KeyedStateBackend):
    @property
    @abstractmethod
    def checkpoint_strategy(self) -> KeyedSnapshotStrategy:
        """How this backend's state is written for a checkpoint."""

    def snapshot_strategy(self, kind: SnapshotKind) -> KeyedSnapshotStrategy:
        if kind == "savepoint":
            return CanonicalSnapshotStrategy(self)
        return self.checkpoint_strategy

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.checkpoint_strategy.notify_complete(checkpoint_id)

    def restore(self, storage: CheckpointStorage, snapshot_dir: str, handles: list[KeyedStateHandle]) -> None:
        """Load the key groups this backend owns from `handles`, of any old parallelism."""
        natives = [h for h in handles if isinstance(h, NativeKeyedHandle)]
        if natives:
            self._restore_native(storage, snapshot_dir, natives)
        for handle in handles:
            if isinstance(handle, CanonicalKeyedHandle):
                restore_canonical(storage, snapshot_dir, handle, self)

    def _restore_native(
        self, storage: CheckpointStorage, snapshot_dir: str, handles: list[NativeKeyedHandle]
    ) -> None:
        raise RestoreError(
            f"this snapshot holds native RocksDB state, which the {self.kind} backend "
            "cannot read; restore it with the rocksdb backend, or take a savepoint "
            "(canonical format) to switch backends"
        )
