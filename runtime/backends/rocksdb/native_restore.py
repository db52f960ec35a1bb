"""Restore of native RocksDB snapshots, at any parallelism.

A handle's SST files come from local recovery where it may be used
(`local_recovery.py`), else from checkpoint storage; several files at once
(reading, checksums and writing release the GIL on large chunks).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lockgate.runtime.backends.rocksdb.database import (
    key_group_prefix,
    list_column_families,
    open_database,
    rows_between,
)
from lockgate.runtime.backends.rocksdb.file_identity import FileIdentity
from lockgate.runtime.backends.rocksdb.local_recovery import Fetched, LocalCopies
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef

if TYPE_CHECKING:
    from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend


# Files fetched at once: enough to overlap one file's reading with another's checksums.
FETCH_THREADS = 4


@dataclass
class _Fetches:
    """How a restore's files came (file counts), and the identities proving the base's."""

    counts: dict[Fetched, int] = field(default_factory=dict)
    identities: dict[str, FileIdentity] = field(default_factory=dict)


def _download(
    storage: CheckpointStorage,
    snapshot_dir: str,
    handle: NativeKeyedHandle,
    into: Path,
    *,
    local: LocalCopies,
    fetches: _Fetches,
) -> None:
    """`handle`'s files into the new directory `into`: SST files from local copies
    where they may be used, the rest (and the private files) from storage, verified."""
    into.mkdir(parents=True)

    def shared(item: tuple[str, FileRef]) -> tuple[str, Fetched, FileIdentity | None]:
        name, ref = item
        return (name, *local.fetch(storage, snapshot_dir, ref, into / name))

    def private(item: tuple[str, FileRef]) -> None:
        storage.download(snapshot_dir, item[1], str(into / item[0]))

    with ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="restore-fetch") as pool:
        privates = pool.map(private, handle.private.items())
        for name, how, identity in pool.map(shared, handle.shared.items()):
            fetches.counts[how] = fetches.counts.get(how, 0) + 1
            if identity is not None:
                fetches.identities[name] = identity
        list(privates)  # raises what a download raised


def _overlap(a: range, b: range) -> range:
    return range(max(a.start, b.start), min(a.stop, b.stop))


@dataclass(frozen=True)
class NativeRestore:
    """What a native restore did, for its measure: whose files the backend opened
    (its foreign key groups range-deleted), and how many rows it copied from the
    other old subtasks (where their ranges straddle the backend's)."""

    base: NativeKeyedHandle
    rows_copied: int
    fetched: Mapping[Fetched, int]
    """SST files by how they came: linked or checked from local recovery, downloaded."""
    identities: Mapping[str, FileIdentity]
    """The base's SST files proven by their identity, by name (`file_identity.py`)."""


def _copy_key_groups(source: Path, handle: NativeKeyedHandle, backend: RocksDBKeyedStateBackend) -> int:
    """Copy the rows of the key groups `backend` owns from the RocksDB at `source`; how many."""
    own = _overlap(handle.key_groups, backend.key_groups)
    copied = 0
    names = list_column_families(source)
    db = open_database(source, names)
    try:
        for name in names:
            cf = db.get_column_family(name)
            rows = rows_between(cf, key_group_prefix(own.start), key_group_prefix(own.stop))
            copied += backend.ingest_rows(name, handle.states[name], own, rows)
            del cf
    finally:
        db.close()
    return copied


def restore_native(
    storage: CheckpointStorage,
    snapshot_dir: str,
    handles: list[NativeKeyedHandle],
    backend: RocksDBKeyedStateBackend,
    local: LocalCopies,
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
    fetches = _Fetches()
    try:
        _download(storage, snapshot_dir, base, work / "base", local=local, fetches=fetches)
        identities = dict(fetches.identities)
        backend.replace_files(work / "base")
        for name, meta in base.states.items():
            backend.add_restored_meta(name, meta)
        if base.key_groups != backend.key_groups:
            backend.drop_foreign_key_groups()
        for index, other in enumerate(h for h in overlapping if h is not base):
            _download(storage, snapshot_dir, other, work / f"other-{index}", local=local, fetches=fetches)
            copied += _copy_key_groups(work / f"other-{index}", other, backend)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return NativeRestore(base, copied, fetches.counts, identities)
