"""Snapshot semantics: the synchronous instant, TTL cleanup, restore errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.checkpointable import RestoreError
from lockgate.runtime.snapshot.metadata import (
    CheckpointMetadata,
    VertexState,
    read_metadata,
    write_metadata,
)
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, snapshot_subtask
from lockgate.runtime.state.backend import StateMigrationError

from tests.conftest import make_backend
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

COUNT = ValueStateDescriptor("count", default=0)


def _complete(storage: CheckpointStorage, pending, checkpoint_id: int, backend) -> str:
    snapshot_dir = storage.checkpoint_dir("job", checkpoint_id)
    state = pending.complete()
    meta = CheckpointMetadata(
        "job",
        checkpoint_id,
        "checkpoint",
        0,
        {"v": VertexState(1, backend.max_parallelism, (state,))},
    )
    write_metadata(storage, snapshot_dir, meta, None)
    return snapshot_dir


@pytest.mark.parametrize(
    ("backend_kind", "fmt"),
    [("heap", "canonical"), ("rocksdb", "canonical"), ("rocksdb", "native")],
)
def test_snapshot_reflects_the_synchronous_instant(
    storage: CheckpointStorage, tmp_path: Path, backend_kind: str, fmt: str
) -> None:
    backend = make_backend(backend_kind, 16, range(16), tmp_path / "a", incremental=fmt == "native")
    count = backend.state(COUNT)
    for key in range(100):
        backend.set_current_key(key)
        count.update(1)
    target = SnapshotTarget(storage, storage.checkpoint_dir("job", 1), "v", 0)
    pending = snapshot_subtask(target, 1, "checkpoint", backend, None)
    # Records keep flowing while the asynchronous part has not run yet.
    for key in range(100, 200):
        backend.set_current_key(key)
        count.update(2)
    for key in range(50):
        backend.set_current_key(key)
        count.update(99)
    snapshot_dir = _complete(storage, pending, 1, backend)

    restored = make_backend(backend_kind, 16, range(16), tmp_path / "b")
    restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(restored)])
    count = restored.state(COUNT)
    for key in range(200):
        restored.set_current_key(key)
        assert count.value() == (1 if key < 100 else 0), key


def test_expired_entries_are_dropped_from_canonical_snapshots(
    storage: CheckpointStorage, tmp_path: Path, backend_kind: str
) -> None:
    clock = ManualClock(1_000)
    backend = make_backend(backend_kind, 8, range(8), tmp_path, clock)
    session = backend.state(ValueStateDescriptor("session", ttl=10))
    events = backend.state(ListStateDescriptor("events", ttl=10))
    seen = backend.state(MapStateDescriptor("seen", ttl=10))
    for key in range(20):
        backend.set_current_key(key)
        session.update("s")
        events.add("old")
        seen.put("old", 1)
    clock.advance(6_000)
    for key in range(10):
        backend.set_current_key(key)
        session.update("fresh")
        events.add("new")
        seen.put("new", 2)
    clock.advance(5_000)  # everything written first has expired

    subtask = LocalSubtask(backend)
    snapshot_dir = storage.checkpoint_dir("job", 1)
    meta = snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", [subtask])
    plain = HeapKeyedStateBackend(8, range(8), clock)
    restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(plain)])
    rows = {name: sum(sum(1 for _ in t.entries(g)) for g in range(8)) for name, t in plain.freeze().items()}
    assert rows == {"session": 10, "events": 10, "seen": 10}
    assert meta.state_bytes > 0
    events = plain.state(ListStateDescriptor("events", ttl=10))
    plain.set_current_key(3)
    assert events.get() == ["new"]


def test_state_nobody_registered_after_restore_survives_the_next_snapshot(
    storage: CheckpointStorage, tmp_path: Path, backend_kind: str
) -> None:
    first = make_backend(backend_kind, 8, range(8), tmp_path / "1")
    first.state(COUNT)
    first.set_current_key("k")
    first.state(COUNT).update(41)
    dir1 = storage.checkpoint_dir("job", 1)
    snapshot_vertex(storage, dir1, ("job", 1, "checkpoint"), "v", [LocalSubtask(first)])

    second = make_backend(backend_kind, 8, range(8), tmp_path / "2")
    restore_vertex(storage, dir1, "v", [LocalSubtask(second)])
    dir2 = storage.checkpoint_dir("job", 2)
    snapshot_vertex(storage, dir2, ("job", 2, "checkpoint"), "v", [LocalSubtask(second)])

    third = make_backend(backend_kind, 8, range(8), tmp_path / "3")
    restore_vertex(storage, dir2, "v", [LocalSubtask(third)])
    third.set_current_key("k")
    assert third.state(COUNT).value() == 41


def test_restored_state_declared_with_another_kind_is_refused(
    storage: CheckpointStorage, tmp_path: Path, backend_kind: str
) -> None:
    first = make_backend(backend_kind, 8, range(8), tmp_path / "1")
    first.set_current_key("k")
    first.state(COUNT).update(1)
    snapshot_dir = storage.checkpoint_dir("job", 1)
    snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", [LocalSubtask(first)])
    second = make_backend(backend_kind, 8, range(8), tmp_path / "2")
    restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(second)])
    with pytest.raises(StateMigrationError, match=r"'count'.*value.*list"):
        second.state(ListStateDescriptor("count"))
    with pytest.raises(StateMigrationError, match="ttl"):
        second.state(ValueStateDescriptor("count", ttl=5))


def test_max_parallelism_must_match_the_snapshot(storage: CheckpointStorage, tmp_path: Path) -> None:
    old = HeapKeyedStateBackend(16, range(16))
    snapshot_dir = storage.checkpoint_dir("job", 1)
    snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", [LocalSubtask(old)])
    with pytest.raises(RestoreError, match=r"max parallelism 16.*32"):
        restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(HeapKeyedStateBackend(32, range(32)))])


def test_native_checkpoint_cannot_restore_into_heap(storage: CheckpointStorage, tmp_path: Path) -> None:
    old = RocksDBKeyedStateBackend(16, range(16), tmp_path, incremental=True)
    old.set_current_key("k")
    old.state(COUNT).update(1)
    snapshot_dir = storage.checkpoint_dir("job", 1)
    subtask = LocalSubtask(old)
    snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", [subtask])
    with pytest.raises(RestoreError, match=r"native RocksDB.*heap.*savepoint"):
        restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(HeapKeyedStateBackend(16, range(16)))])


def test_savepoints_are_canonical_and_relocatable(storage: CheckpointStorage, tmp_path: Path) -> None:
    old = RocksDBKeyedStateBackend(16, range(16), tmp_path / "old", incremental=True)
    old.set_current_key("k")
    old.state(COUNT).update(7)
    savepoint = storage.savepoint_dir("sp1")
    subtask = LocalSubtask(old)
    meta = snapshot_vertex(storage, savepoint, ("job", 1, "savepoint"), "v", [subtask])
    assert meta.vertices["v"].subtasks[0].keyed.format == "canonical"  # type: ignore[union-attr]

    moved = CheckpointStorage(f"file://{tmp_path}/elsewhere")
    moved.fs.mv(savepoint, f"{moved.root}/copy", recursive=True)
    assert read_metadata(moved, f"{moved.root}/copy").kind == "savepoint"
    new = HeapKeyedStateBackend(16, range(16))
    restore_vertex(moved, f"{moved.root}/copy", "v", [LocalSubtask(new)])
    new.set_current_key("k")
    assert new.state(COUNT).value() == 7
