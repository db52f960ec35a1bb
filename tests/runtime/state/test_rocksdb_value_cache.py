"""The RocksDB backend's write-back cache of value rows (backends/rocksdb/value_table.py):
what the job reads is what it wrote, whatever reads or writes the column family
past the cache; what a snapshot holds is what the job wrote; the cache stays
within its bound."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.backends.rocksdb.value_table import ENTRY_OVERHEAD, RocksDBValueTable
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.tables import CurrentKey

from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex


def _counts(backend: RocksDBKeyedStateBackend, keys: range) -> dict[int, int]:
    count = backend.state(ValueStateDescriptor("count", default=0))
    seen = {}
    for key in keys:
        backend.set_current_key(key)
        seen[key] = count.value()
    return seen


def _count_up(backend: RocksDBKeyedStateBackend, keys: range, times: int) -> None:
    count = backend.state(ValueStateDescriptor("count", default=0))
    for _ in range(times):
        for key in keys:
            backend.set_current_key(key)
            count.update(count.value() + 1)


def test_rows_restored_after_a_read_are_what_the_next_read_sees(tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        assert _counts(backend, range(3)) == {0: 0, 1: 0, 2: 0}  # "no row" now cached
        source = RocksDBKeyedStateBackend(8, range(8), tmp_path / "source")
        try:
            _count_up(source, range(3), 4)
            frozen = source.freeze()
            meta = source.metas["count"]
            for group in range(8):
                backend.load("count", meta, group, list(frozen["count"].entries(group)))
            for table in frozen.values():
                table.release()
        finally:
            source.close()
        assert _counts(backend, range(3)) == {0: 4, 1: 4, 2: 4}
    finally:
        backend.close()


def test_a_snapshot_holds_writes_the_cache_has_not_flushed(tmp_path: Path) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    for n, incremental in enumerate((False, True), start=1):
        backend = RocksDBKeyedStateBackend(8, range(8), tmp_path / f"live-{n}", incremental=incremental)
        try:
            _count_up(backend, range(50), 3)
            snapshot_vertex(
                storage,
                storage.checkpoint_dir("job", n),
                ("job", n, "checkpoint"),
                "v",
                [LocalSubtask(backend)],
            )
            _count_up(backend, range(50), 1)  # after the snapshot: not in it
        finally:
            backend.close()
        restored = RocksDBKeyedStateBackend(8, range(8), tmp_path / f"restored-{n}")
        try:
            restore_vertex(storage, storage.checkpoint_dir("job", n), "v", [LocalSubtask(restored)])
            assert _counts(restored, range(50)) == dict.fromkeys(range(50), 3)
        finally:
            restored.close()


def test_the_cache_stays_within_its_bound_and_loses_nothing(tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        cf = backend.column_family("count")
        table = RocksDBValueTable(ValueStateDescriptor("count", default=0), cf, cache_bytes=4096)
        current = CurrentKey()
        for round_ in range(3):
            for key in range(1000):
                current.set(key, str(key).encode(), key % 8)
                table.put(current, round_ * 1000 + key)
                assert table.cached_bytes <= 2 * 4096
        for key in range(1000):
            current.set(key, str(key).encode(), key % 8)
            assert table.get(current) == 2000 + key
            assert table.cached_bytes <= 2 * 4096
        table.flush()
        assert cf.get(current.db_prefix) is not None  # every row reached RocksDB
    finally:
        backend.close()


def test_a_read_value_changed_in_place_is_not_state_until_updated(tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path, clock=ManualClock(0))
    try:
        items = backend.state(ValueStateDescriptor("items", default=()))
        backend.set_current_key("k")
        items.update(["a"])
        items.value().append("b")
        assert items.value() == ["a"]
    finally:
        backend.close()


def test_rows_read_then_written_are_counted_once_after_a_flush(tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        table = RocksDBValueTable(
            ValueStateDescriptor("count", default=0), backend.column_family("count"), cache_bytes=1 << 20
        )
        current = CurrentKey()
        for key in range(100):
            current.set(key, str(key).encode(), key % 8)
            table.get(current)
        read_only = table.cached_bytes
        for key in range(100):
            current.set(key, str(key).encode(), key % 8)
            table.put(current, 7)
        table.flush()
        assert table.cached_bytes == read_only + 100 * len(table.codec.dumps(7))
    finally:
        backend.close()


def test_a_hot_key_written_again_and_again_stays_in_the_cache(tmp_path: Path) -> None:
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        cf = backend.column_family("count")
        table = RocksDBValueTable(ValueStateDescriptor("count", default=0), cf, cache_bytes=4096)
        current = CurrentKey()
        current.set("hot", b"hot", 3)
        for n in range(10_000):
            table.put(current, n)
        assert cf.get(current.db_prefix) is None, "one row, far below the bound: nothing to flush"
        assert table.get(current) == 9_999
    finally:
        backend.close()


def test_a_full_read_cache_forgets_its_older_rows_and_keeps_the_newer(tmp_path: Path) -> None:
    """A state a little larger than the cache should mostly hit: a full read cache
    forgets only its older half. The rows are deleted from RocksDB behind the
    table's back, so a read that still sees one was served from the cache."""
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        cf = backend.column_family("count")
        writer = RocksDBValueTable(ValueStateDescriptor("count", default=0), cf)
        current = CurrentKey()
        for key in range(400):
            current.set(key, str(key).encode(), key % 8)
            writer.put(current, key)
        writer.flush()
        table = RocksDBValueTable(ValueStateDescriptor("count", default=0), cf, cache_bytes=16_384)
        for key in range(400):  # through the cache, which holds fewer rows than that
            current.set(key, str(key).encode(), key % 8)
            assert table.get(current) == key
            assert table.cached_bytes <= 16_384
        for key in range(400):
            current.set(key, str(key).encode(), key % 8)
            cf.delete(current.db_prefix)
        kept = 0  # newest first: a miss makes room, which would forget older rows
        for key in reversed(range(400)):
            current.set(key, str(key).encode(), key % 8)
            if table.get(current) != key:
                break
            kept += 1
        assert kept * 2 >= 16_384 // (ENTRY_OVERHEAD + 8), f"only the newest {kept} rows were kept"
    finally:
        backend.close()


def test_large_rows_after_small_ones_keep_the_read_cache_within_its_bound(tmp_path: Path) -> None:
    """Forgetting the older half frees little when those rows are small: the table
    forgets again until the new row fits."""
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path)
    try:
        cf = backend.column_family("s")
        writer = RocksDBValueTable(ValueStateDescriptor("s"), cf)
        current = CurrentKey()
        rows = [(key, key) for key in range(300)] + [(key, "x" * 8_000) for key in range(1_000, 1_020)]
        for key, value in rows:
            current.set(key, str(key).encode(), key % 8)
            writer.put(current, value)
        writer.flush()
        table = RocksDBValueTable(ValueStateDescriptor("s"), cf, cache_bytes=16_384)
        for key, value in rows:
            current.set(key, str(key).encode(), key % 8)
            assert table.get(current) == value
            assert table.cached_bytes <= 16_384, f"{table.cached_bytes} bytes after reading key {key}"
    finally:
        backend.close()
