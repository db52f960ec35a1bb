"""RocksDB backend (rocksdict, raw mode): a column family per state.

One key group is one contiguous key range (see `database`): a canonical
snapshot reads it with one seek, and a restore at another parallelism drops
foreign key groups with one range delete per column family. The WAL is off:
durability comes from checkpoints, and a failed subtask restores from one,
never from local files — except local recovery (`local_recovery.py`), which
takes a checkpoint's SST files from this machine's disk where they provably
hold the checkpoint's bytes. The backend owns its checkpoint strategy (native
incremental or canonical) and restores native snapshots itself.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import rocksdict
from lockgate.runtime.backends.rocksdb.database import (
    column_family_options,
    key_group_prefix,
    list_column_families,
    open_database,
    prefix_successor,
    rows_between,
    write_options,
)
from lockgate.runtime.backends.rocksdb.dropped_ranges import DELAY_S, DroppedRangeCompaction
from lockgate.runtime.backends.rocksdb.local_recovery import LocalCopies, discard_left_before, leave
from lockgate.runtime.backends.rocksdb.native_restore import NativeRestore, restore_native
from lockgate.runtime.backends.rocksdb.native_snapshot import NativeSnapshotStrategy
from lockgate.runtime.backends.rocksdb.timer_queue import RocksDBTimerQueue
from lockgate.runtime.backends.rocksdb.ttl_sweep import ColumnFamilySweep
from lockgate.runtime.backends.rocksdb.value_table import RocksDBValueTable
from lockgate.runtime.clock import Clock
from lockgate.runtime.snapshot.canonical import CanonicalSnapshotStrategy
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import StateMeta
from lockgate.runtime.state.codecs import Codec, codec_for
from lockgate.runtime.state.descriptors import StateDescriptor
from lockgate.runtime.state.tables import MISSING, CurrentKey, FrozenTable

_WRITE_BATCH_ROWS = 10_000

log = logging.getLogger(__name__)


class RocksDBMapTable:
    def __init__(self, descriptor: StateDescriptor, cf: rocksdict.Rdict) -> None:
        self.codec: Codec = codec_for(descriptor)
        self._cf = cf

    def get(self, current: CurrentKey, map_key: bytes) -> Any:
        data = self._cf.get(current.map_prefix + map_key)
        return MISSING if data is None else self.codec.loads(data)

    def put(self, current: CurrentKey, map_key: bytes, stored: Any) -> None:
        self._cf.put(current.map_prefix + map_key, self.codec.dumps(stored))

    def delete(self, current: CurrentKey, map_key: bytes) -> None:
        self._cf.delete(current.map_prefix + map_key)

    def items(self, current: CurrentKey) -> Iterator[tuple[bytes, Any]]:
        prefix = current.map_prefix
        start = len(prefix)
        rows = []
        # Materialized so the caller may change the map while iterating.
        for row, data in self._cf.items(from_key=prefix):
            assert isinstance(row, bytes)  # raw mode
            if not row.startswith(prefix):
                break
            rows.append((row[start:], self.codec.loads(data)))
        return iter(rows)

    def clear(self, current: CurrentKey) -> None:
        self._cf.delete_range(current.map_prefix, prefix_successor(current.map_prefix))


class _FrozenDatabase:
    """A read-only RocksDB checkpoint (hard links) of the live database.

    rocksdict's `Snapshot` iterators ignore the snapshot (only point reads
    honour it), so a consistent view for iteration is taken as a checkpoint:
    its files are immutable whatever the live database does meanwhile.
    """

    def __init__(self, live: Any, directory: Path) -> None:
        self._directory = directory
        rocksdict.Checkpoint(live).create_checkpoint(str(directory))
        names = list_column_families(directory)
        self._db: Any = open_database(directory, names, access_type=rocksdict.AccessType.read_only())
        self.tables = {name: _FrozenColumnFamily(self, self._db.get_column_family(name)) for name in names}
        self._open = len(self.tables)
        if not self._open:
            self._close()

    def released(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._close()

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self._directory, ignore_errors=True)


class _FrozenColumnFamily:
    """One column family of a frozen database, read one key group at a time."""

    def __init__(self, owner: _FrozenDatabase, cf: Any) -> None:
        self._owner: _FrozenDatabase | None = owner
        self._cf = cf

    def entries(self, key_group: int) -> Iterator[tuple[bytes, bytes]]:
        return rows_between(self._cf, key_group_prefix(key_group), key_group_prefix(key_group + 1), drop=2)

    def release(self) -> None:
        if self._owner is not None:
            self._cf = None
            owner, self._owner = self._owner, None
            owner.released()


class RocksDBKeyedStateBackend(CheckpointableKeyedStateBackend):
    """`incremental`: checkpoints are native RocksDB checkpoints that upload only
    the SST files no completed checkpoint uploaded before; otherwise canonical.
    `local_recovery`: the job's local-recovery directory on this machine, where a
    closing backend leaves its latest checkpoint's files and a restore looks for
    them (`local_recovery.py`); None: every restore downloads."""

    kind = "rocksdb"

    def __init__(
        self,
        max_parallelism: int,
        key_groups: range,
        local_dir: str | Path,
        clock: Clock | None = None,
        *,
        incremental: bool = False,
        local_recovery: Path | None = None,
    ) -> None:
        super().__init__(max_parallelism, key_groups, clock)
        self._local_recovery = local_recovery
        self._created_ns = time.time_ns()
        self._left_discarded = False
        # Names this instance's SST files in shared checkpoint storage: file
        # numbers are unique only within one RocksDB instance.
        self.instance_id = uuid.uuid4().hex
        self.path = Path(local_dir) / f"db-{self.instance_id}"
        self.path.mkdir(parents=True)
        self._write_options = write_options()
        self.db: Any = None
        self._cfs: dict[str, rocksdict.Rdict] = {}
        # By state: read and written through a cache the backend flushes (value_table).
        self._value_tables: dict[str, RocksDBValueTable] = {}
        self.native_restore: NativeRestore | None = None
        """What restoring a native snapshot did (None: none restored)."""
        self.dropped_range_compaction: DroppedRangeCompaction | None = None
        """Of the key groups a native restore range-deleted (None: none deleted)."""
        self._open()
        self._native = NativeSnapshotStrategy(self) if incremental else None
        self._checkpoints = self._native or CanonicalSnapshotStrategy(self)

    @property
    def checkpoint_strategy(self) -> NativeSnapshotStrategy | CanonicalSnapshotStrategy:
        return self._checkpoints

    def _restore_native(
        self, storage: CheckpointStorage, snapshot_dir: str, handles: list[NativeKeyedHandle]
    ) -> None:
        local = LocalCopies(self._local_recovery)
        restored = self.native_restore = restore_native(storage, snapshot_dir, handles, self, local)
        if restored is not None and self._native is not None:
            # Its SST files are in storage already: the next checkpoint reuses them.
            self._native.seed(restored.base, snapshot_dir, restored.identities)
        if restored is not None:
            fetched = ", ".join(f"{n} {how}" for how, n in sorted(restored.fetched.items()))
            log.info("key groups %s restored natively; SST files: %s", self.key_groups, fetched or "none")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)
        compaction = self.dropped_range_compaction
        if (
            compaction is not None
            and not compaction.started
            and self.clock.monotonic_ms() >= compaction.due_ms
        ):
            compaction.start([self.db.get_column_family(name) for name in self._cfs])
        if self._local_recovery is not None and not self._left_discarded:
            # Every subtask of this launch has restored: what earlier ones left is done with.
            self._left_discarded = True
            discard_left_before(self._local_recovery, self._created_ns)

    def _open(self) -> None:
        names = list_column_families(self.path) if (self.path / "CURRENT").exists() else []
        self.db = open_database(self.path, names)
        self.db.set_write_options(self._write_options)
        self._cfs = {name: self._column_family(name) for name in names}

    def _column_family(self, name: str) -> rocksdict.Rdict:
        cf: rocksdict.Rdict = self.db.get_column_family(name)
        cf.set_write_options(self._write_options)
        return cf

    def column_family(self, name: str) -> rocksdict.Rdict:
        cf = self._cfs.get(name)
        if cf is None:
            self.db.create_column_family(name, column_family_options())
            cf = self._cfs[name] = self._column_family(name)
        return cf

    def _value_table(self, descriptor: StateDescriptor) -> RocksDBValueTable:
        table = RocksDBValueTable(descriptor, self._state_cf(descriptor))
        self._value_tables[descriptor.name] = table
        return table

    def flush_cached_writes(self) -> None:
        """Put what the value tables hold back into RocksDB: anything that reads
        the column families past the tables calls this first."""
        for table in self._value_tables.values():
            table.flush()

    def _forget_cached_reads(self, states: Iterable[str]) -> None:
        for state in states:
            table = self._value_tables.get(state)
            if table is not None:
                table.forget()

    def drop_expired(self, budget: int | None = None) -> int:
        # The sweep reads, rewrites and deletes rows past the tables.
        self._forget_cached_reads(n for n, (d, _) in self._states.items() if d.ttl_ms is not None)
        return super().drop_expired(budget)

    def _map_table(self, descriptor: StateDescriptor) -> RocksDBMapTable:
        return RocksDBMapTable(descriptor, self._state_cf(descriptor))

    def _make_timer_queue(self, name: str) -> RocksDBTimerQueue:
        return RocksDBTimerQueue(self.column_family(name), self.key_groups)

    def _state_cf(self, descriptor: StateDescriptor) -> rocksdict.Rdict:
        """The column family of a state, swept if the state has a TTL."""
        cf = self.column_family(descriptor.name)
        if descriptor.ttl_ms is not None:
            self._ttl_cleanup.add(ColumnFamilySweep(cf, codec_for(descriptor).compact))
        return cf

    def freeze(self) -> dict[str, FrozenTable]:
        self.flush_cached_writes()
        directory = self.path.parent / f"frozen-{uuid.uuid4().hex}"
        return dict(_FrozenDatabase(self.db, directory).tables)

    def load(
        self, state: str, meta: StateMeta, key_group: int, entries: Iterable[tuple[bytes, bytes]]
    ) -> None:
        self._accept_restored(state, meta, key_group)
        self._forget_cached_reads([state])
        self.column_family(state)
        cf_handle = self.db.get_column_family_handle(state)
        prefix = key_group_prefix(key_group)
        batch = rocksdict.WriteBatch(raw_mode=True)
        for rest, data in entries:
            batch.put(prefix + rest, data, cf_handle)
            if batch.len() >= _WRITE_BATCH_ROWS:
                self.db.write(batch, self._write_options)
                batch = rocksdict.WriteBatch(raw_mode=True)
        if batch.len():
            self.db.write(batch, self._write_options)
        queue = self._timer_queues.get(state)
        if isinstance(queue, RocksDBTimerQueue):
            queue.invalidate()  # its rows changed underneath it

    def ingest_rows(
        self, state: str, meta: StateMeta, key_groups: range, rows: Iterable[tuple[bytes, bytes]]
    ) -> int:
        """Write whole rows of `state` (key group prefix included), all in `key_groups`,
        which this subtask must own; how many. A straddling native restore copies a
        range of another database this way: through an SST file ingested into the
        column family, so no memtable, no flush, and RocksDB puts the file in the
        lowest level its keys allow — for key groups no other file of this database
        holds, the bottom one, where no compaction rewrites them afterwards."""
        for group in (key_groups.start, key_groups.stop - 1):  # a range: its ends decide
            self._accept_restored(state, meta, group)
        self._forget_cached_reads([state])
        cf = self.column_family(state)
        path = self.path.parent / f"ingest-{uuid.uuid4().hex}.sst"
        written = 0
        try:
            writer = rocksdict.SstFileWriter(options=column_family_options())
            for row, data in rows:
                if not written:
                    writer.open(str(path))
                writer[row] = data
                written += 1
            if written:
                writer.finish()
                options = rocksdict.IngestExternalFileOptions()
                options.set_move_files(True)
                cf.ingest_external_file([str(path)], options)
        finally:
            path.unlink(missing_ok=True)
        queue = self._timer_queues.get(state)
        if isinstance(queue, RocksDBTimerQueue):
            queue.invalidate()
        return written

    def drop_foreign_key_groups(self) -> None:
        """Delete every row outside this subtask's key groups (after a native restore)."""
        low = key_group_prefix(self.key_groups.start)
        high = key_group_prefix(self.key_groups.stop)
        self._forget_cached_reads(list(self._value_tables))
        for cf in self._cfs.values():
            cf.delete_range(b"", low)
            # Key groups are below 2**15, so every row sorts before b"\xff".
            cf.delete_range(high, b"\xff")
        due_ms = self.clock.monotonic_ms() + int(DELAY_S * 1000)
        self.dropped_range_compaction = DroppedRangeCompaction([(None, low), (high, None)], due_ms)

    def replace_files(self, directory: Path) -> None:
        """Reopen on the RocksDB files in `directory` (a downloaded native snapshot)."""
        if self._states or self._timer_queues:
            raise RuntimeError("native restore must happen before any state or timer is registered")
        self._release()
        shutil.rmtree(self.path)
        shutil.move(str(directory), str(self.path))
        self._open()

    def _release(self) -> None:
        self._timer_queues.clear()  # they read column families about to close
        self._value_tables.clear()
        self._cfs.clear()
        if self.db is not None:
            compaction = self.dropped_range_compaction
            cancelled = compaction is not None and compaction.cancel(self.db)
            try:
                self.db.close()
            except Exception:
                if not cancelled:
                    raise
                # Shutting down after the cancel: its files are deleted next.
            self.db = None

    def close(self) -> None:
        self._release()
        self._states.clear()
        shutil.rmtree(self.path, ignore_errors=True)
        kept = None if self._native is None else self._native.take_kept()
        if kept is None:
            return
        if self._local_recovery is not None:
            try:
                leave(kept, self._local_recovery, f"{self.instance_id}-chk-{kept.checkpoint_id}")
                return
            except OSError:
                log.warning("checkpoint %s not left for local recovery", kept.checkpoint_id, exc_info=True)
        shutil.rmtree(kept.directory, ignore_errors=True)
