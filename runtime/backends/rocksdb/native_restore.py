"""Restore of native RocksDB snapshots, at any parallelism."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lockgate.runtime.backends.rocksdb.database import (
    key_group_prefix,
    list_column_families,
    open_database,
    rows_between,
)
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage

if TYPE_CHECKING:
    from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend


def _download(storage: CheckpointStorage, snapshot_dir: str, handle: NativeKeyedHandle, into: Path) -> None:
    into.mkdir(parents=True)
    for name, ref in {**handle.shared, **handle.private}.items():
        storage.download(snapshot_dir, ref, str(into / name))


def _overlap(a: range, b: range) -> range:
    return range(max(a.start, b.start), min(a.stop, b.stop))


@dataclass(frozen=True)
class NativeRestore:
    """What a native restore did, for its measure: whose files the backend opened
    (its foreign key groups range-deleted), and how many rows it copied from the
    other old subtasks (where their ranges straddle the backend's)."""

    base: NativeKeyedHandle
    rows_copied: int


def _copy_key_groups(source: Path, handle: NativeKeyedHandle, backend: RocksDBKeyedStateBackend) -> int:
    """Copy the rows of the key groups `backend` owns from the RocksDB at `source`; how many."""
    own = _overlap(handle.key_groups, backend.key_groups)
    copied = 0
    names = list_column_families(source)
    db = open_database(source, names)
    try:
        for name in names:
            meta = handle.states[name]
            cf = db.get_column_family(name)
            rows = rows_between(cf, key_group_prefix(own.start), key_group_prefix(own.stop))
            for group, grouped in itertools.groupby(rows, key=lambda kv: int.from_bytes(kv[0][:2], "big")):
                entries = [(row[2:], data) for row, data in grouped]
                backend.load(name, meta, group, entries)
                copied += len(entries)
            del cf
    finally:
        db.close()
    return copied


def restore_native(
    storage: CheckpointStorage,
    snapshot_dir: str,
    handles: list[NativeKeyedHandle],
    backend: RocksDBKeyedStateBackend,
) -> NativeRestore | None:
    """Restore `backend`'s key groups from native snapshots of any old parallelism.

    The handle overlapping most becomes the base database (its foreign key
    groups range-deleted); rows of the others are copied in. None: no handle
    overlaps the backend's key groups.
    """
    overlapping = [h for h in handles if _overlap(h.key_groups, backend.key_groups)]
    if not overlapping:
        return None
    base = max(overlapping, key=lambda h: len(_overlap(h.key_groups, backend.key_groups)))
    work = Path(tempfile.mkdtemp(prefix="restore-", dir=backend.path.parent))
    copied = 0
    try:
        _download(storage, snapshot_dir, base, work / "base")
        backend.replace_files(work / "base")
        for name, meta in base.states.items():
            backend.add_restored_meta(name, meta)
        if base.key_groups != backend.key_groups:
            backend.drop_foreign_key_groups()
        for index, other in enumerate(h for h in overlapping if h is not base):
            _download(storage, snapshot_dir, other, work / f"other-{index}")
            copied += _copy_key_groups(work / f"other-{index}", other, backend)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return NativeRestore(base, copied)
