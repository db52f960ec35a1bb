"""Native incremental snapshots: only new SST files are uploaded; retention by reference."""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable
from pathlib import Path

from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SubtaskState, read_metadata, write_metadata
from lockgate.runtime.snapshot.metadata import VertexState as MetadataVertexState
from lockgate.runtime.snapshot.retention import (
    delete_unreferenced_shared_files,
    referenced_shared_files,
    unreferenced_shared_files,
)
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import PendingSubtaskSnapshot, SnapshotTarget, snapshot_subtask

from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

COUNT = ValueStateDescriptor("count", default=0)
SESSION = ValueStateDescriptor("session", ttl=1)


def _write(backend: RocksDBKeyedStateBackend, keys: range, value: int) -> None:
    count = backend.state(COUNT)
    for key in keys:
        backend.set_current_key(key)
        count.update(value)


def _checkpoint(storage: CheckpointStorage, subtask: LocalSubtask, n: int) -> CheckpointMetadata:
    return snapshot_vertex(
        storage, storage.checkpoint_dir("job", n), ("job", n, "checkpoint"), "v", [subtask]
    )


def _shared_refs(meta: CheckpointMetadata) -> dict[str, int]:
    handle = meta.vertices["v"].subtasks[0].keyed
    return {ref.path: ref.size for ref in handle.shared.values()}  # type: ignore[union-attr]


def _uploaded(storage: CheckpointStorage) -> set[str]:
    return set(storage.list_names(storage.shared_dir("job")))


def test_second_checkpoint_uploads_only_new_files(storage: CheckpointStorage, tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, incremental=True)
    subtask = LocalSubtask(backend)
    _write(backend, range(20_000), 1)
    first = _checkpoint(storage, subtask, 1)
    after_first = _uploaded(storage)
    _write(backend, range(200), 2)  # 1% of the keys change
    second = _checkpoint(storage, subtask, 2)
    new_files = _uploaded(storage) - after_first
    first_refs, second_refs = _shared_refs(first), _shared_refs(second)
    assert set(first_refs) & set(second_refs), "unchanged SST files are referenced again"
    new_bytes = sum(size for path, size in second_refs.items() if path not in first_refs)
    assert len(new_files) >= 1
    assert new_bytes <= 0.1 * sum(first_refs.values())

    restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / "restored")
    restore_vertex(storage, storage.checkpoint_dir("job", 2), "v", [LocalSubtask(restored)])
    count = restored.state(COUNT)
    for key in (0, 199, 200, 19_999):
        restored.set_current_key(key)
        assert count.value() == (2 if key < 200 else 1)


def _uncompleted_checkpoint(
    storage: CheckpointStorage, tmp_path: Path
) -> tuple[RocksDBKeyedStateBackend, SubtaskState]:
    """Checkpoint 1 of a fresh backend, uploaded but without `_metadata`."""
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, incremental=True)
    _write(backend, range(1000), 1)
    target = SnapshotTarget(storage, storage.checkpoint_dir("job", 1), "v", 0)
    return backend, snapshot_subtask(target, 1, "checkpoint", backend, None).complete()


def test_aborted_checkpoint_uploads_are_not_reused(storage: CheckpointStorage, tmp_path: Path) -> None:
    backend, _ = _uncompleted_checkpoint(storage, tmp_path)  # checkpoint 1 never completes
    before = _uploaded(storage)
    meta = _checkpoint(storage, LocalSubtask(backend), 2)
    assert not {posixpath.basename(p) for p in _shared_refs(meta)} & before


def test_retention_deletes_exactly_the_unreferenced_files(storage: CheckpointStorage, tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, incremental=True)
    subtask = LocalSubtask(backend)
    metas = {}
    for n in range(1, 5):
        _write(backend, range(n * 1000, n * 1000 + 3000), n)
        metas[n] = _checkpoint(storage, subtask, n)
        # Compaction rewrites SSTs, so files of older checkpoints become garbage.
        backend.column_family("count").compact_range(None, None)
    retained = [3, 4]
    needed = referenced_shared_files(storage, "job", retained)
    doomed = unreferenced_shared_files(storage, "job", retained, latest_completed=4)
    all_files = {posixpath.join(storage.shared_dir("job"), n) for n in _uploaded(storage)}
    assert doomed, "compaction must have made some files unreferenced"
    assert set(doomed) == all_files - needed
    assert delete_unreferenced_shared_files(storage, "job", retained, latest_completed=4) == doomed
    assert {posixpath.join(storage.shared_dir("job"), n) for n in _uploaded(storage)} == needed

    for n in retained:
        restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / f"r{n}")
        restore_vertex(storage, storage.checkpoint_dir("job", n), "v", [LocalSubtask(restored)])
        restored.set_current_key(n * 1000)
        assert restored.state(COUNT).value() == n


def test_files_of_in_flight_or_newer_checkpoints_are_never_taken(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    # Checkpoint 1 uploaded its files, but its acknowledgement is not in yet.
    _, in_flight = _uncompleted_checkpoint(storage, tmp_path)
    snapshot_dir = storage.checkpoint_dir("job", 1)
    uploaded = {
        storage.resolve(snapshot_dir, ref)
        for ref in in_flight.keyed.shared.values()  # type: ignore[union-attr]
    }
    assert uploaded
    assert unreferenced_shared_files(storage, "job", [], latest_completed=0) == []
    assert unreferenced_shared_files(storage, "job", [], latest_completed=5, in_flight=[1]) == []
    # Once it is neither in flight nor newer than the latest completed one, and no
    # retained checkpoint names them, they are garbage (an aborted checkpoint's).
    assert set(unreferenced_shared_files(storage, "job", [], latest_completed=5)) == uploaded


def test_expired_entries_nobody_reads_leave_the_native_checkpoints(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    clock = ManualClock(start_ms=1_000_000)
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, clock, incremental=True)
    subtask = LocalSubtask(backend)
    session = backend.state(SESSION)
    for user in range(5_000):
        backend.set_current_key(user)
        session.update("open")
    _checkpoint(storage, subtask, 1)
    clock.advance(2_000)  # every session has expired; none is read again
    for user in range(5_000, 5_100):
        backend.set_current_key(user)
        session.update("open")
    _checkpoint(storage, subtask, 2)

    restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / "restored", clock)
    restore_vertex(storage, storage.checkpoint_dir("job", 2), "v", [LocalSubtask(restored)])
    assert restored.metas["session"].ttl
    rows = list(restored.column_family("session").keys())
    assert len(rows) == 100, "only the live sessions are in the checkpoint"


class _IdThatPausesWhenCompared(int):
    """A checkpoint id that runs `on_compare` the first time another id is compared
    with it. `notify_complete` compares the ids of pending checkpoints with the one
    that completed, so this is a seam inside its pass over them: another thread can
    be made to act at exactly that point, and the interleaving is the same every run."""

    on_compare: Callable[[], None]
    compared: bool = False

    def _pause(self) -> None:
        if not self.compared:
            self.compared = True
            self.on_compare()

    def __lt__(self, other: object) -> bool:
        self._pause()
        return int(self) < other  # type: ignore[operator]

    def __le__(self, other: object) -> bool:
        self._pause()
        return int(self) <= other  # type: ignore[operator]

    def __gt__(self, other: object) -> bool:
        self._pause()
        return int(self) > other  # type: ignore[operator]

    def __ge__(self, other: object) -> bool:
        self._pause()
        return int(self) >= other  # type: ignore[operator]


def _upload_on_another_thread(
    pending: PendingSubtaskSnapshot,
) -> tuple[threading.Thread, threading.Event, list[SubtaskState]]:
    """The upload thread of a task: waits for `go`, then runs the asynchronous part."""
    go = threading.Event()
    result: list[SubtaskState] = []
    thread = threading.Thread(target=lambda: go.wait() and result.append(pending.complete()), name="snapshot")
    thread.start()
    return thread, go, result


def _complete_while_uploading(storage: CheckpointStorage, tmp_path: Path) -> tuple[LocalSubtask, bool]:
    """Checkpoint 2 completes while checkpoint 3's upload finishes: the upload
    thread hands over checkpoint 3's files at the moment the chain thread, told that
    2 completed, goes through the checkpoints still pending. Checkpoint 1 was
    uploaded but never completed (another subtask declined it), so there is
    something to go through. Returns the subtask and whether the interleaving
    happened, once checkpoint 3 has completed too."""
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, incremental=True)
    subtask = LocalSubtask(backend)
    _write(backend, range(0, 1000), 1)
    target = SnapshotTarget(storage, storage.checkpoint_dir("job", 1), "v", 0)
    snapshot_subtask(target, 1, "checkpoint", backend, None).complete()
    _write(backend, range(1000, 2000), 2)
    target = SnapshotTarget(storage, storage.checkpoint_dir("job", 2), "v", 0)
    _write_metadata(storage, 2, snapshot_subtask(target, 2, "checkpoint", backend, None).complete())
    _write(backend, range(2000, 3000), 3)
    target = SnapshotTarget(storage, storage.checkpoint_dir("job", 3), "v", 0)
    thread, go, third = _upload_on_another_thread(snapshot_subtask(target, 3, "checkpoint", backend, None))
    completed = _IdThatPausesWhenCompared(2)

    def upload_meanwhile() -> None:
        go.set()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the upload of checkpoint 3 did not finish"

    completed.on_compare = upload_meanwhile
    try:
        backend.notify_checkpoint_complete(completed)
    finally:
        go.set()
        thread.join()
    assert third, "the upload of checkpoint 3 failed"
    _write_metadata(storage, 3, third[0])
    backend.notify_checkpoint_complete(3)
    return subtask, completed.compared


def _write_metadata(storage: CheckpointStorage, n: int, state: SubtaskState) -> None:
    vertices = {"v": MetadataVertexState(1, 8, (state,))}
    write_metadata(
        storage,
        storage.checkpoint_dir("job", n),
        CheckpointMetadata("job", n, "checkpoint", 0, vertices),
        None,
    )


def test_a_completion_while_an_upload_hands_over_its_files_loses_nothing(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    subtask, interleaved = _complete_while_uploading(storage, tmp_path)
    assert interleaved, "checkpoint 3's upload must finish while notify_complete(2) runs"
    third = _shared_refs(read_metadata(storage, storage.checkpoint_dir("job", 3)))
    assert subtask.keyed is not None
    fourth = _shared_refs(_checkpoint(storage, subtask, 4))
    # Nothing changed since checkpoint 3: its files, confirmed, are all reused.
    assert set(fourth) == set(third)


def test_after_that_interleaving_retention_keeps_every_file_the_latest_checkpoint_needs(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    subtask, _ = _complete_while_uploading(storage, tmp_path)
    backend = subtask.keyed
    assert isinstance(backend, RocksDBKeyedStateBackend)
    _write(backend, range(3000, 4000), 4)
    backend.column_family("count").compact_range(None, None)
    _checkpoint(storage, subtask, 4)
    delete_unreferenced_shared_files(storage, "job", [4], latest_completed=4)
    present = {posixpath.join(storage.shared_dir("job"), n) for n in _uploaded(storage)}
    assert referenced_shared_files(storage, "job", [4]) <= present

    restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / "restored")
    restore_vertex(storage, storage.checkpoint_dir("job", 4), "v", [LocalSubtask(restored)])
    count = restored.state(COUNT)
    for key in range(4000):
        restored.set_current_key(key)
        assert count.value() == key // 1000 + 1, key


def test_late_completion_notices_do_not_let_retention_delete_a_reused_file(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    """Completion notices reach the chain thread through etcd, barriers through the
    exchange: a snapshot can start before the previous checkpoint's notice arrived.
    Checkpoint 3 then uploads again an SST that checkpoint 2 uploaded, so storage
    holds two copies of it; checkpoint 4, whose notice of 3 is late too, reuses
    2's copy, which retention after 3 (keeping one checkpoint, the default) must
    not have deleted."""
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, incremental=True)

    def checkpoint(n: int) -> None:
        target = SnapshotTarget(storage, storage.checkpoint_dir("job", n), "v", 0)
        _write_metadata(storage, n, snapshot_subtask(target, n, "checkpoint", backend, None).complete())
        delete_unreferenced_shared_files(storage, "job", [n], latest_completed=n)

    _write(backend, range(0, 1000), 1)
    checkpoint(1)
    backend.notify_checkpoint_complete(1)
    _write(backend, range(1000, 2000), 2)
    checkpoint(2)
    _write(backend, range(2000, 3000), 3)
    checkpoint(3)  # before the notice of 2: uploads 2's new SST once more
    backend.notify_checkpoint_complete(2)
    _write(backend, range(3000, 4000), 4)
    checkpoint(4)  # before the notice of 3: reuses 2's copy
    backend.notify_checkpoint_complete(3)

    present = {posixpath.join(storage.shared_dir("job"), n) for n in _uploaded(storage)}
    assert referenced_shared_files(storage, "job", [4]) <= present
    restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / "restored")
    restore_vertex(storage, storage.checkpoint_dir("job", 4), "v", [LocalSubtask(restored)])
    count = restored.state(COUNT)
    for key in range(4000):
        restored.set_current_key(key)
        assert count.value() == key // 1000 + 1, key
