"""Damaged snapshots are errors that name the file, never silently wrong state."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.canonical import read_index
from lockgate.runtime.snapshot.local import LocalSubtask, restore_vertex, snapshot_vertex
from lockgate.runtime.snapshot.metadata import CheckpointMetadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError
from lockgate.runtime.snapshot.subtask import restore_subtask
from lockgate.runtime.state.operator_state import OperatorStateStore

COUNT = ValueStateDescriptor("count", default=0)


def _snapshot(storage: CheckpointStorage, tmp_path: Path, native: bool) -> tuple[str, CheckpointMetadata]:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path / "old", incremental=native)
    count = backend.state(COUNT)
    for key in range(500):
        backend.set_current_key(key)
        count.update(key)
    operator = OperatorStateStore()
    operator.list_state("offsets").add_all([1, 2, 3])
    snapshot_dir = storage.checkpoint_dir("job", 1)
    meta = snapshot_vertex(
        storage,
        snapshot_dir,
        ("job", 1, "checkpoint"),
        "v",
        [LocalSubtask(backend, operator)],
    )
    return snapshot_dir, meta


def _restore(storage: CheckpointStorage, snapshot_dir: str, tmp_path: Path, native: bool) -> None:
    keyed = (
        RocksDBKeyedStateBackend(8, range(8), tmp_path / "new")
        if native
        else HeapKeyedStateBackend(8, range(8))
    )
    restore_vertex(storage, snapshot_dir, "v", [LocalSubtask(keyed, OperatorStateStore())])


def _files(meta: CheckpointMetadata, snapshot_dir: str, kind: str) -> list[str]:
    subtask = meta.vertices["v"].subtasks[0]
    handle = subtask.operator if kind == "operator" else subtask.keyed
    assert handle is not None
    refs = list(handle.files())
    if kind == "shared":
        refs = [r for r in refs if r.path.endswith(".sst")]
    return [posixpath.normpath(posixpath.join(snapshot_dir, r.path)) for r in refs]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize(("native", "kind"), [(False, "keyed"), (True, "shared"), (False, "operator")])
@pytest.mark.parametrize("where", [0.0, 0.1, 0.5, 0.99])
def test_flipped_byte_is_detected_and_names_the_file(
    storage: CheckpointStorage, tmp_path: Path, native: bool, kind: str, where: float
) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native)
    path = _files(meta, snapshot_dir, kind)[0]
    flip_byte(path, int(Path(path).stat().st_size * where))
    with pytest.raises(SnapshotCorruptError) as error:
        _restore(storage, snapshot_dir, tmp_path, native)
    assert path in str(error.value)


@pytest.mark.parametrize(("native", "kind"), [(False, "keyed"), (True, "shared"), (False, "operator")])
def test_truncated_file_is_detected(
    storage: CheckpointStorage, tmp_path: Path, native: bool, kind: str
) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native)
    path = _files(meta, snapshot_dir, kind)[0]
    size = Path(path).stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    with pytest.raises(SnapshotCorruptError, match="truncated") as error:
        _restore(storage, snapshot_dir, tmp_path, native)
    assert path in str(error.value)


def test_missing_metadata_means_incomplete(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, _ = _snapshot(storage, tmp_path, native=False)
    Path(snapshot_dir, "_metadata").unlink()
    with pytest.raises(SnapshotCorruptError, match="_metadata: missing"):
        _restore(storage, snapshot_dir, tmp_path, native=False)


def test_truncated_metadata_is_detected(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, _ = _snapshot(storage, tmp_path, native=False)
    path = Path(snapshot_dir, "_metadata")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotCorruptError, match="_metadata"):
        _restore(storage, snapshot_dir, tmp_path, native=False)


def test_metadata_with_a_changed_byte_fails_its_checksum(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, _ = _snapshot(storage, tmp_path, native=False)
    path = Path(snapshot_dir, "_metadata")
    path.write_bytes(path.read_bytes().replace(b'"checkpoint_id": 1', b'"checkpoint_id": 7', 1))
    with pytest.raises(SnapshotCorruptError, match="_metadata: checksum mismatch"):
        _restore(storage, snapshot_dir, tmp_path, native=False)


def test_missing_shared_file_is_detected(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native=True)
    path = _files(meta, snapshot_dir, "shared")[0]
    Path(path).unlink()
    with pytest.raises(SnapshotCorruptError, match="missing") as error:
        _restore(storage, snapshot_dir, tmp_path, native=True)
    assert path in str(error.value)


def test_missing_state_file_is_detected(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native=False)
    path = _files(meta, snapshot_dir, "keyed")[0]
    Path(path).unlink()
    with pytest.raises(SnapshotCorruptError, match="missing") as error:
        _restore(storage, snapshot_dir, tmp_path, native=False)
    assert path in str(error.value)


def test_restore_reads_only_its_own_key_groups(storage: CheckpointStorage, tmp_path: Path) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native=False)
    path = _files(meta, snapshot_dir, "keyed")[0]
    index = read_index(storage, path, Path(path).stat().st_size)
    damaged = index.sections["count"][-1]  # the highest key group: subtask 1 of 2 owns it
    flip_byte(path, damaged.offset + damaged.length // 2)

    def restore(index: int) -> HeapKeyedStateBackend:
        backend = HeapKeyedStateBackend(8, key_group_range(8, 2, index))
        restore_subtask(
            storage,
            snapshot_dir,
            meta,
            vertex="v",
            parallelism=2,
            index=index,
            keyed=backend,
            operator=None,
        )
        return backend

    bystander = restore(0)
    bystander.set_current_key(next(k for k in range(500) if key_group(k, 8) < 4))
    assert bystander.state(COUNT).value() is not None
    with pytest.raises(SnapshotCorruptError, match=f"key group {damaged.key_group}"):
        restore(1)
