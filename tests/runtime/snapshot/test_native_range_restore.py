"""A native RocksDB checkpoint restored at another parallelism by key-group range,
as Flink's RocksDB backend does: a new subtask whose range one old subtask's range
covers opens that subtask's files and range-deletes the key groups it does not own,
copying no row; where ranges straddle, only the rows of the other old subtasks'
overlap are copied. Real RocksDB, measured by the rows the restore copied."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime import key_group, key_group_range
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.backends.rocksdb.database import key_group_prefix
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.runtime.snapshot import rescale_model as model
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

M = 16
OLD_P = 2
KINDS = ["value", "map"]
ROWS_PER_KEY = 1 + 2  # a value row; a map's two entries
KEYS: list[object] = list(range(400))


def _rows_in(groups: range) -> int:
    return ROWS_PER_KEY * sum(1 for key in KEYS if key_group(key, M) in groups)


def _rocksdb(subtask: LocalSubtask) -> RocksDBKeyedStateBackend:
    assert isinstance(subtask.keyed, RocksDBKeyedStateBackend)
    return subtask.keyed


@pytest.fixture
def checkpoint(storage: CheckpointStorage, tmp_path: Path) -> str:
    """A native checkpoint of the model state at parallelism 2: key groups 0-7 and 8-15."""
    old = model.build("rocksdb", M, OLD_P, tmp_path / "old", native=True)
    try:
        model.fill(old, KINDS, KEYS)
        snapshot_dir = storage.checkpoint_dir("job", 1)
        snapshot_vertex(storage, snapshot_dir, ("job", 1, "checkpoint"), "v", old)
        return snapshot_dir
    finally:
        model.close(old)


def _restored(
    storage: CheckpointStorage, snapshot_dir: str, parallelism: int, local: Path
) -> list[LocalSubtask]:
    new = model.build("rocksdb", M, parallelism, local)
    restore_vertex(storage, snapshot_dir, "v", new)
    return new


def test_a_range_one_old_subtask_covers_opens_its_files_and_copies_no_row(
    storage: CheckpointStorage, checkpoint: str, tmp_path: Path
) -> None:
    new = _restored(storage, checkpoint, 4, tmp_path / "new")  # 0-3, 4-7 | 8-11, 12-15
    try:
        old_ranges = [key_group_range(M, OLD_P, index) for index in range(OLD_P)]
        for index, subtask in enumerate(new):
            backend = _rocksdb(subtask)
            restored = backend.native_restore
            assert restored is not None
            covering = next(r for r in old_ranges if backend.key_groups.start in r)
            assert restored.base.key_groups == covering, (
                f"subtask {index} opens the files of its covering range"
            )
            assert restored.rows_copied == 0, f"subtask {index} copied rows"
            assert model.row_count(backend) == _rows_in(backend.key_groups), f"subtask {index} keeps its own"
        model.verify(new, KINDS, KEYS)  # every key on its owner, intact; no foreign key group anywhere
    finally:
        model.close(new)


def test_a_straddling_range_copies_only_the_rows_of_the_other_subtasks_overlap(
    storage: CheckpointStorage, checkpoint: str, tmp_path: Path
) -> None:
    new = _restored(storage, checkpoint, 3, tmp_path / "new")  # 0-5 | 6-10 | 11-15 over 0-7 | 8-15
    try:
        straddling = _rocksdb(new[1])
        assert straddling.key_groups == range(6, 11)
        restored = straddling.native_restore
        assert restored is not None
        assert restored.base.key_groups == range(8, 16), "the old subtask overlapping most is opened"
        assert _rows_in(range(6, 8)) > 0
        assert restored.rows_copied == _rows_in(range(6, 8)), "only key groups 6-7 are copied"
        for covered in (new[0], new[2]):
            backend = _rocksdb(covered)
            assert backend.native_restore is not None
            assert backend.native_restore.rows_copied == 0, f"{backend.key_groups} lies in one old range"
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def test_the_rows_a_straddling_range_copies_lie_in_the_bottom_level_where_no_compaction_rewrites_them(
    storage: CheckpointStorage, checkpoint: str, tmp_path: Path
) -> None:
    new = _restored(storage, checkpoint, 3, tmp_path / "new")
    try:
        straddling = _rocksdb(new[1])
        restored = straddling.native_restore
        assert restored is not None
        files = straddling.db.live_files()
        bottom = max(f["level"] for f in files)
        copied = [f for f in files if f["level"] == bottom and f["start_key"][:2] < (8).to_bytes(2, "big")]
        assert bottom > 0
        assert sum(f["num_entries"] for f in copied) == restored.rows_copied, files
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def _foreign_files(backend: RocksDBKeyedStateBackend) -> list[dict[str, object]]:
    """The backend's SST files holding a row or tombstone outside its key groups."""
    low, high = key_group_prefix(backend.key_groups.start), key_group_prefix(backend.key_groups.stop)
    return [f for f in backend.db.live_files() if f["start_key"] < low or f["end_key"] >= high]


def test_range_deleted_key_groups_are_compacted_away_at_a_checkpoint_30_s_after_the_restore(
    storage: CheckpointStorage, checkpoint: str, tmp_path: Path
) -> None:
    clock = ManualClock(start_ms=1_000_000)
    new = [
        LocalSubtask(
            RocksDBKeyedStateBackend(
                M, key_group_range(M, 3, index), tmp_path / "new" / str(index), clock, incremental=True
            )
        )
        for index in range(3)
    ]
    try:
        restore_vertex(storage, checkpoint, "v", new)
        backends = [_rocksdb(s) for s in new]
        assert all(_foreign_files(b) for b in backends), "the opened files hold the deleted key groups"
        compactions = [b.dropped_range_compaction for b in backends]
        snapshot_vertex(storage, storage.checkpoint_dir("job", 2), ("job", 2, "checkpoint"), "v", new)
        clock.advance(29_000)
        second = snapshot_vertex(
            storage, storage.checkpoint_dir("job", 3), ("job", 3, "checkpoint"), "v", new
        )
        assert not any(c is None or c.started for c in compactions), "not yet: a rescale may follow soon"
        clock.advance(1_000)
        snapshot_vertex(storage, storage.checkpoint_dir("job", 4), ("job", 4, "checkpoint"), "v", new)
        for backend, compaction in zip(backends, compactions, strict=True):
            assert compaction is not None
            assert compaction.finished.wait(30), "the compaction of the deleted key groups ended"
            assert not _foreign_files(backend), backend.key_groups
        after = snapshot_vertex(storage, storage.checkpoint_dir("job", 5), ("job", 5, "checkpoint"), "v", new)
        assert _referenced_bytes(after) < _referenced_bytes(second)
        model.verify(new, KINDS, KEYS)
    finally:
        model.close(new)


def _referenced_bytes(metadata: CheckpointMetadata) -> int:
    return sum(
        ref.size
        for subtask in metadata.vertices["v"].subtasks
        if isinstance(subtask.keyed, NativeKeyedHandle)
        for ref in subtask.keyed.shared.values()
    )
