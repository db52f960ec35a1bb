"""Local recovery of native RocksDB checkpoints: a rescale on the machine where the
old subtasks ran links their SST files from the local-recovery directory instead of
downloading them, when each file is provably the one its checksums were computed
from; a file changed in place, truncated or replaced there is downloaded and
verified instead. Real RocksDB, real files, the state checked key by key."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from lockgate.runtime import key_group_range
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.backends.rocksdb.local_recovery import MANIFEST
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.runtime.snapshot import rescale_model as model
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

M = 16
KINDS = ["value", "map", "list"]
KEYS: list[object] = list(range(600))


def _build(parallelism: int, local: Path, recovery: Path) -> list[LocalSubtask]:
    return [
        LocalSubtask(
            RocksDBKeyedStateBackend(
                M,
                key_group_range(M, parallelism, index),
                local / f"p{parallelism}" / str(index),
                incremental=True,
                local_recovery=recovery,
            )
        )
        for index in range(parallelism)
    ]


def _fetched(subtasks: list[LocalSubtask]) -> dict[str, int]:
    total: dict[str, int] = {}
    for subtask in subtasks:
        assert isinstance(subtask.keyed, RocksDBKeyedStateBackend)
        restored = subtask.keyed.native_restore
        assert restored is not None
        for how, count in restored.fetched.items():
            total[how] = total.get(how, 0) + count
    return total


def _rocksdb(subtask: LocalSubtask) -> RocksDBKeyedStateBackend:
    assert isinstance(subtask.keyed, RocksDBKeyedStateBackend)
    return subtask.keyed


def _base_files(subtask: LocalSubtask) -> dict[str, object]:
    restored = _rocksdb(subtask).native_restore
    assert restored is not None
    return dict(restored.base.shared)


def _left_files(recovery: Path) -> list[Path]:
    return sorted(p for p in recovery.glob("*/*.sst"))


@pytest.fixture
def recovery(tmp_path: Path) -> Path:
    return tmp_path / "local-recovery"


@pytest.fixture
def stopped(storage: CheckpointStorage, tmp_path: Path, recovery: Path) -> str:
    """Checkpoint 1 of the model state at parallelism 2, its subtasks closed: what an
    in-place rescale's stop checkpoint leaves on this machine."""
    old = _build(2, tmp_path / "old", recovery)
    try:
        model.fill(old, KINDS, KEYS)
        snapshot_dir = storage.checkpoint_dir("job", 1)
        snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", old)
    finally:
        model.close(old)
    assert _left_files(recovery), "the closed subtasks left their checkpoint's SST files"
    return snapshot_dir


def _shared_files(storage: CheckpointStorage) -> list[str]:
    return [p for p in storage.fs.find(storage.shared_dir("job")) if p.endswith(".sst")]


def test_a_rescale_on_this_machine_links_every_sst_file_and_reads_none_from_storage(
    storage: CheckpointStorage, stopped: str, tmp_path: Path, recovery: Path
) -> None:
    # Without the shared files in storage a download would fail: every SST file must come from here.
    moved = tmp_path / "moved-away"
    shared = storage.shared_dir("job")
    shutil.move(shared, moved)
    new = _build(3, tmp_path / "new", recovery)  # 0-5 | 6-10 | 11-15 over 0-7 | 8-15
    try:
        restore_vertex(storage, stopped, "v", new)
        fetched = _fetched(new)
        assert set(fetched) == {"linked"}, fetched
        # Links are independent: of what was left, and of each other's — subtasks 1 and 2
        # both opened old subtask 1's files; 1 compacts them away, 2 still reads them.
        shutil.rmtree(recovery)
        assert _base_files(new[1]) == _base_files(new[2])
        for name in _rocksdb(new[1]).metas:
            _rocksdb(new[1]).column_family(name).compact_range(None, None)
        model.verify(new, KINDS, KEYS)
        shutil.move(str(moved), shared)

        # 3 -> 2 from the rescaled subtasks' own checkpoint: linked again, exact again.
        snapshot_dir = storage.checkpoint_dir("job", 2)
        snapshot_vertex(storage, snapshot_dir, ("job", 2, "checkpoint"), "v", new)
    finally:
        model.close(new)
    back = _build(2, tmp_path / "back", recovery)
    try:
        restore_vertex(storage, snapshot_dir, "v", back)
        fetched = _fetched(back)
        assert set(fetched) == {"linked"}, fetched
        model.verify(back, KINDS, KEYS)
    finally:
        model.close(back)


def _flip_a_byte(path: Path) -> None:
    with open(path, "r+b") as file:
        file.seek(path.stat().st_size // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 1)


def _replace_with_other_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    other = path.with_suffix(".new")
    other.write_bytes(bytes(data))
    os.replace(other, path)


@pytest.mark.parametrize(
    "damage",
    [_flip_a_byte, _truncate, _replace_with_other_bytes],
    ids=["changed-in-place", "truncated", "replaced"],
)
def test_a_left_file_changed_truncated_or_replaced_is_downloaded_and_verified_instead(
    storage: CheckpointStorage,
    stopped: str,
    tmp_path: Path,
    recovery: Path,
    damage: Callable[[Path], None],
) -> None:
    for path in _left_files(recovery):
        damage(path)
    new = _build(3, tmp_path / "new", recovery)
    try:
        restore_vertex(storage, stopped, "v", new)
        fetched = _fetched(new)
        assert set(fetched) == {"downloaded"}, fetched
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def test_an_unchanged_file_with_another_inode_is_read_and_checked_not_trusted(
    storage: CheckpointStorage, stopped: str, tmp_path: Path, recovery: Path
) -> None:
    for path in _left_files(recovery):
        copy = path.with_suffix(".copy")
        shutil.copyfile(path, copy)
        os.replace(copy, path)
    new = _build(3, tmp_path / "new", recovery)
    try:
        restore_vertex(storage, stopped, "v", new)
        fetched = _fetched(new)
        assert set(fetched) == {"checked"}, fetched
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def test_files_left_in_another_boot_are_checked_not_trusted(
    storage: CheckpointStorage, stopped: str, tmp_path: Path, recovery: Path
) -> None:
    for manifest in recovery.glob(f"*/{MANIFEST}"):
        content = json.loads(manifest.read_text())
        content["boot_id"] = "another-boot"
        manifest.write_text(json.dumps(content))
    new = _build(3, tmp_path / "new", recovery)
    try:
        restore_vertex(storage, stopped, "v", new)
        fetched = _fetched(new)
        assert set(fetched) == {"checked"}, fetched
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def test_what_was_left_is_deleted_once_the_new_subtasks_first_checkpoint_completed(
    storage: CheckpointStorage, stopped: str, tmp_path: Path, recovery: Path
) -> None:
    left = sorted(recovery.iterdir())
    new = _build(3, tmp_path / "new", recovery)
    try:
        restore_vertex(storage, stopped, "v", new)
        assert sorted(recovery.iterdir()) == left, "kept until a checkpoint of the new subtasks completes"
        snapshot_vertex(storage, storage.checkpoint_dir("job", 2), ("job", 2, "checkpoint"), "v", new)
        assert not set(recovery.iterdir()) & set(left)
    finally:
        model.close(new)
    assert len(list(recovery.iterdir())) == 3, "each closed subtask left its latest checkpoint"
