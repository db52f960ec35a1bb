"""Damaged snapshots are errors that name the file, never silently wrong state."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import zlib
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.restore_point import verify
from lockgate.runtime.snapshot.canonical import read_index
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata, write_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef, SnapshotCorruptError
from lockgate.runtime.snapshot.subtask import restore_subtask
from lockgate.runtime.state.operator_state import OperatorStateStore

from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

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
    keyed = meta.vertices["v"].subtasks[0].keyed
    assert isinstance(keyed, CanonicalKeyedHandle)
    index = read_index(storage, path, Path(path).stat().st_size, keyed.index_sha256)
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
    # Every key of subtask 0's key groups reads back its value (the default, 0, would hide a loss).
    own = [k for k in range(1, 500) if key_group(k, 8) < 4]
    for key in own:
        bystander.set_current_key(key)
        assert bystander.state(COUNT).value() == key
    assert len(own) > 100
    with pytest.raises(SnapshotCorruptError, match=f"key group {damaged.key_group}"):
        restore(1)


def _rewrite_operator_ref(
    storage: CheckpointStorage, snapshot_dir: str, meta: CheckpointMetadata, path: str
) -> str:
    """Point the operator state of subtask 0 at `path` in `_metadata` (with a valid checksum),
    recording the size, CRC-32 and SHA-256 of the file it names, so only its place can give it away."""
    subtask = meta.vertices["v"].subtasks[0]
    assert subtask.operator is not None
    target = posixpath.normpath(posixpath.join(snapshot_dir, path)) if "://" not in path else path
    data = Path(target.removeprefix("file://")).read_bytes()
    ref = FileRef(path, len(data), zlib.crc32(data), hashlib.sha256(data).hexdigest())
    operator = dataclasses.replace(subtask.operator, file=ref)
    vertex = dataclasses.replace(
        meta.vertices["v"], subtasks=(dataclasses.replace(subtask, operator=operator),)
    )
    write_metadata(storage, snapshot_dir, dataclasses.replace(meta, vertices={"v": vertex}), None)
    return path


@pytest.fixture
def outside_file(storage: CheckpointStorage) -> Path:
    """A file beside the job's directory, as another job's or the system's would be."""
    path = Path(storage.root, "elsewhere", "secret")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not state of this snapshot")
    return path


@pytest.mark.parametrize(
    "named",
    [
        "../../elsewhere/secret",  # out of the snapshot and the job's directory
        "ABSOLUTE",  # an absolute path
        "FILE_URL",  # another scheme
        "../../other-job/shared/secret",  # another job's shared directory
        "../shared/../../elsewhere/secret",  # through the job's shared directory and out again
    ],
)
def test_metadata_naming_a_file_outside_the_snapshot_is_refused_naming_it(
    storage: CheckpointStorage, tmp_path: Path, outside_file: Path, named: str
) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native=False)
    other = Path(storage.root, "other-job", "shared", "secret")
    other.parent.mkdir(parents=True)
    other.write_bytes(outside_file.read_bytes())
    path = {"ABSOLUTE": str(outside_file), "FILE_URL": f"file://{outside_file}"}.get(named, named)
    _rewrite_operator_ref(storage, snapshot_dir, meta, path)

    with pytest.raises(SnapshotCorruptError, match="outside the snapshot") as verified:
        verify(f"file://{snapshot_dir}")
    assert f"{snapshot_dir}/_metadata" in str(verified.value)
    assert repr(path) in str(verified.value)
    with pytest.raises(SnapshotCorruptError, match="outside the snapshot"):
        _restore(storage, snapshot_dir, tmp_path, native=False)


def test_metadata_may_name_files_of_its_own_jobs_shared_directory(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    snapshot_dir, meta = _snapshot(storage, tmp_path, native=True)
    shared = _files(meta, snapshot_dir, "shared")
    assert shared
    assert all(p.startswith(storage.shared_dir("job") + "/") for p in shared)
    verify(f"file://{snapshot_dir}")
    _restore(storage, snapshot_dir, tmp_path, native=True)


def _without_sha256(node: object) -> object:
    if isinstance(node, dict):
        return {k: _without_sha256(v) for k, v in node.items() if k not in ("sha256", "index_sha256")}
    return [_without_sha256(item) for item in node] if isinstance(node, list) else node


def test_metadata_whose_files_have_no_sha256_is_refused_naming_it(
    storage: CheckpointStorage, tmp_path: Path
) -> None:
    """Failed before: a file named without its SHA-256 was read with only its CRC-32
    checked, so a file swapped for another of the same size and CRC passed."""
    snapshot_dir, _ = _snapshot(storage, tmp_path, native=False)
    path = f"{snapshot_dir}/_metadata"
    body = json.dumps(_without_sha256(json.loads(Path(path).read_bytes().split(b"\n")[0])), sort_keys=True)
    Path(path).write_bytes(body.encode() + f"\ncrc32:{zlib.crc32(body.encode()):08x}\n".encode())
    with pytest.raises(SnapshotCorruptError, match="sha256") as refused:
        read_metadata(storage, snapshot_dir)
    assert path in str(refused.value)
