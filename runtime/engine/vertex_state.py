"""The state a task keeps for each vertex it hosts, one type per kind of vertex:
a source's offsets and side-written committables, a process vertex's keyed
state, a sink's committables; the rest keep nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lockgate.runtime.api.graph import KEYED_KINDS, Vertex
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.clock import Clock
from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.engine.channel_state import Groups, read_channel_state, replay
from lockgate.runtime.engine.events import Element
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
    # What state TTL and processing-time timers read (None: the system clock).
    clock: Clock | None = None


class TaskVertexState:
    """What a task keeps for one vertex it hosts: restored at launch, snapshotted at
    each barrier, closed at the end. A map, flat_map or filter keeps nothing.
    (A snapshot's own record of a vertex is `snapshot.metadata.VertexState`.)"""

    keyed: CheckpointableKeyedStateBackend | None = None  # what snapshots and restores take
    operator: OperatorStateStore | None = None

    def __init__(self, vertex: Vertex, index: int, parallelism: int) -> None:
        self.vertex = vertex
        self.index = index
        self.parallelism = parallelism

    def replay(self, batch_size: int) -> list[Element]:
        """What the restored checkpoint's channel state holds for this subtask's key
        groups, to be read before any new input."""
        return []

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

    def snapshot(self, trigger: Trigger) -> PendingSubtaskSnapshot:
        """The synchronous part; run `complete()` of the result off the task thread."""
        storage = CheckpointStorage(trigger.target)
        target = SnapshotTarget(storage, storage.root, self.vertex.name, self.index)
        return snapshot_subtask(target, trigger.checkpoint_id, trigger.kind, self.keyed, self.operator)

    def close(self) -> None:
        if self.keyed is not None:
            self.keyed.close()


class KeyedVertexState(TaskVertexState):
    """A process or window vertex: keyed state in the configured backend, for the key groups
    this subtask owns."""

    def __init__(self, vertex: Vertex, index: int, parallelism: int, config: StateConfig) -> None:
        super().__init__(vertex, index, parallelism)
        groups = key_group_range(config.max_parallelism, parallelism, index)
        if config.backend == "rocksdb":
            directory = config.local_dir / vertex.name
            self.keyed = RocksDBKeyedStateBackend(
                config.max_parallelism,
                groups,
                directory / str(index),
                incremental=config.incremental,
                clock=config.clock,
                local_recovery=directory / "local-recovery",
            )
        else:
            self.keyed = HeapKeyedStateBackend(config.max_parallelism, groups, config.clock)
        self._key_groups = groups
        self._channel_state: Groups = {}

    def restore(self, point: RestorePoint) -> None:
        super().restore(point)
        if (state := point.metadata.vertices.get(self.vertex.name)) is not None:
            groups = read_channel_state(point.storage, point.storage.root, state)
            self._channel_state = {g: pairs for g, pairs in groups.items() if g in self._key_groups}

    def replay(self, batch_size: int) -> list[Element]:
        # Handed over once: the gate holds the records until it has read them, nothing after.
        groups, self._channel_state = self._channel_state, {}
        return replay(groups, self._key_groups, batch_size)


class CommittingVertexState(TaskVertexState):
    """A sink: the committables of checkpoints not yet committed, in union list
    state "committables", so that at any new parallelism every writer sees them all."""

    def __init__(self, vertex: Vertex, index: int, parallelism: int) -> None:
        super().__init__(vertex, index, parallelism)
        self.operator: OperatorStateStore = OperatorStateStore()
        self._uncommitted: dict[int, list[Any]] = {}

    @property
    def has_uncommitted(self) -> bool:
        return bool(self._uncommitted)

    def restored_committables(self) -> list[Any]:
        return [c for _, c in self.operator.union_list_state("committables").get()]

    def record_committables(self, checkpoint_id: int, committables: list[Any]) -> None:
        if committables:
            self._uncommitted[checkpoint_id] = committables
        self.operator.union_list_state("committables").update(
            [[n, c] for n, batch in sorted(self._uncommitted.items()) for c in batch]
        )

    def take_committable(self, completed: int) -> list[Any]:
        """The committables of checkpoints up to `completed`, now to be committed."""
        due = [n for n in self._uncommitted if n <= completed]
        return [c for n in sorted(due) for c in self._uncommitted.pop(n)]


class SourceVertexState(CommittingVertexState):
    """A source: its partitions' offsets in union list state "offsets", and the
    committables of what its reader writes on the side (dead letters)."""

    def restored_offsets(self) -> dict[str, Any]:
        return {name: offset for name, offset in self.operator.union_list_state("offsets").get()}

    def record_offsets(self, offsets: dict[str, Any]) -> None:
        self.operator.union_list_state("offsets").update([[n, o] for n, o in offsets.items()])


def vertex_state(vertex: Vertex, index: int, parallelism: int, config: StateConfig) -> TaskVertexState:
    """The state a vertex of `vertex.kind` keeps in subtask `index`."""
    if vertex.kind == "source":
        return SourceVertexState(vertex, index, parallelism)
    if vertex.kind == "sink":
        return CommittingVertexState(vertex, index, parallelism)
    if vertex.kind in KEYED_KINDS:
        return KeyedVertexState(vertex, index, parallelism, config)
    return TaskVertexState(vertex, index, parallelism)
