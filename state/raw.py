"""The stored bytes of one keyed state in a range of key groups, read by the code
a restore reads them with: the canonical format's sections (checked against
their checksums), native RocksDB snapshots restored into a RocksDB backend of
their own. What comes out is the canonical `(rest, data)` records of each key
group, whichever format held them (`runtime/state/tables.py`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.canonical import open_canonical, read_sections
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle, NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import VertexState
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import StateMeta

Records = list[tuple[bytes, bytes]]


def overlap(a: range, b: range) -> range:
    return range(max(a.start, b.start), min(a.stop, b.stop))


def state_metas(storage: CheckpointStorage, snapshot_dir: str, vertex: VertexState) -> dict[str, StateMeta]:
    """Every keyed state of `vertex` with its layout, as the snapshot's files record it."""
    metas: dict[str, StateMeta] = {}
    for subtask in vertex.subtasks:
        handle = subtask.keyed
        if isinstance(handle, NativeKeyedHandle):
            metas.update(handle.states)
        elif isinstance(handle, CanonicalKeyedHandle):
            metas.update(open_canonical(storage, snapshot_dir, handle)[1].states)
    return metas


def raw_records(
    storage: CheckpointStorage, snapshot_dir: str, vertex: VertexState, state: str, key_groups: range
) -> Iterator[tuple[int, Records]]:
    """`(key group, records)` of `state` for each of `key_groups` that holds any."""
    handles = sorted(
        (s.keyed for s in vertex.subtasks if s.keyed is not None and overlap(s.keyed.key_groups, key_groups)),
        key=lambda handle: handle.key_groups.start,
    )
    natives = [h for h in handles if isinstance(h, NativeKeyedHandle)]
    if natives:
        yield from _native_records(storage, snapshot_dir, vertex, natives, state, key_groups)
    for handle in handles:
        if isinstance(handle, CanonicalKeyedHandle):
            path, index = open_canonical(storage, snapshot_dir, handle)
            if state in index.states:
                with storage.open_read(path) as stream:
                    yield from read_sections(
                        stream, path, index, state, overlap(handle.key_groups, key_groups)
                    )


def _native_records(  # noqa: PLR0917 - raw_records' own arguments, passed on
    storage: CheckpointStorage,
    snapshot_dir: str,
    vertex: VertexState,
    handles: list[NativeKeyedHandle],
    state: str,
    key_groups: range,
) -> Iterator[tuple[int, Records]]:
    """Restored as a task restores them, into a RocksDB of their own for `key_groups`,
    then read from a frozen copy of it one key group at a time."""
    if not any(state in handle.states for handle in handles):
        return
    local = tempfile.mkdtemp(prefix="lockgate-state-")
    backend = RocksDBKeyedStateBackend(vertex.max_parallelism, key_groups, local)
    try:
        backend.restore(storage, snapshot_dir, list(handles))
        frozen = backend.freeze()
        try:
            table = frozen.get(state)
            if table is not None:
                for group in key_groups:
                    records = list(table.entries(group))
                    if records:
                        yield group, records
        finally:
            for each in frozen.values():
                each.release()
    finally:
        backend.close()
        shutil.rmtree(local, ignore_errors=True)
