"""The state a task keeps for each stateful vertex it hosts, restored and snapshotted.

- a source keeps its partitions' offsets in union list state "offsets";
- a process vertex keeps keyed state in the configured backend;
- a sink keeps the committables of checkpoints not yet committed in union list
  state "committables", so at any new parallelism every writer sees them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lockgate.runtime.api.graph import Vertex
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.keygroups import key_group_range
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import (
    PendingSubtaskSnapshot,
    SnapshotTarget,
    restore_subtask,
    snapshot_subtask,
)
from lockgate.runtime.state.operator_state import OperatorStateStore

BackendKind = Literal["heap", "rocksdb"]


@dataclass(frozen=True)
class StateConfig:
    backend: BackendKind
    local_dir: Path
    max_parallelism: int
    incremental: bool = True


@dataclass
class VertexState:
    vertex: Vertex
    index: int
    parallelism: int
    keyed: CheckpointableKeyedStateBackend | None = None
    operator: OperatorStateStore | None = None
    uncommitted: dict[int, list[Any]] = field(default_factory=dict)

    @staticmethod
    def create(vertex: Vertex, index: int, parallelism: int, config: StateConfig) -> VertexState:
        state = VertexState(vertex, index, parallelism)
        if vertex.kind in ("source", "sink"):
            state.operator = OperatorStateStore()
        elif vertex.kind == "process":
            groups = key_group_range(config.max_parallelism, parallelism, index)
            if config.backend == "rocksdb":
                directory = config.local_dir / vertex.name / str(index)
                state.keyed = RocksDBKeyedStateBackend(
                    config.max_parallelism, groups, directory, incremental=config.incremental
                )
            else:
                state.keyed = HeapKeyedStateBackend(config.max_parallelism, groups)
        return state

    @property
    def stateful(self) -> bool:
        return self.keyed is not None or self.operator is not None

    def restore(self, point: RestorePoint) -> None:
        storage = point.storage
        restore_subtask(
            storage,
            storage.root,
            point.metadata,
            vertex=self.vertex.name,
            parallelism=self.parallelism,
            index=self.index,
            keyed=self.keyed,
            operator=self.operator,
        )

    # -- sources ---------------------------------------------------------------------

    def restored_offsets(self) -> dict[str, Any]:
        assert self.operator is not None
        return {name: offset for name, offset in self.operator.union_list_state("offsets").get()}

    def record_offsets(self, offsets: dict[str, Any]) -> None:
        assert self.operator is not None
        self.operator.union_list_state("offsets").update([[n, o] for n, o in offsets.items()])

    # -- sinks -----------------------------------------------------------------------

    def restored_committables(self) -> list[Any]:
        assert self.operator is not None
        return [c for _, c in self.operator.union_list_state("committables").get()]

    def record_committables(self, checkpoint_id: int, committables: list[Any]) -> None:
        assert self.operator is not None
        if committables:
            self.uncommitted[checkpoint_id] = committables
        self.operator.union_list_state("committables").update(
            [[n, c] for n, batch in sorted(self.uncommitted.items()) for c in batch]
        )

    def take_committable(self, completed: int) -> list[Any]:
        """The committables of checkpoints up to `completed`, now to be committed."""
        due = [n for n in self.uncommitted if n <= completed]
        return [c for n in sorted(due) for c in self.uncommitted.pop(n)]

    # -- snapshots -------------------------------------------------------------------

    def snapshot(self, trigger: Trigger) -> PendingSubtaskSnapshot:
        """The synchronous part; run `complete()` of the result off the task thread."""
        storage = CheckpointStorage(trigger.target)
        target = SnapshotTarget(storage, storage.root, self.vertex.name, self.index)
        return snapshot_subtask(target, trigger.checkpoint_id, trigger.kind, self.keyed, self.operator)

    def close(self) -> None:
        if self.keyed is not None:
            self.keyed.close()
