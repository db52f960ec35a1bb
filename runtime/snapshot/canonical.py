"""The canonical keyed-state format, independent of the backend that wrote it.

    magic "LGKS\\x01"
    section*        one per (state, key group) with entries; records are
                    varint len(rest), rest, varint len(data), data
    index           JSON: states with their kind and TTL flag, and per state
                    the [key group, offset, length, crc32, sha256] of each section
    footer          index offset (u64), index length (u64), index crc32 (u32), "LGKE"

Sections are ordered by state, then key group, so a restore reads, per state,
one contiguous stretch holding exactly its own key groups. Every byte a
restore reads is covered by the CRC-32 and SHA-256 of its section or of the
index; the index's SHA-256 is in the handle, in the signed `_metadata`, so a
restore that reads only its own key groups still reads only what the job wrote.
Expired TTL entries are dropped while writing.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import posixpath
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError
from lockgate.runtime.snapshot.strategy import KeyedSnapshotStrategy, KeyedUpload
from lockgate.runtime.state.backend import KeyedStateBackend, StateMeta
from lockgate.runtime.state.tables import FrozenTable
from lockgate.runtime.varint import decode_varint, encode_varint

MAGIC = b"LGKS\x01"
END_MAGIC = b"LGKE"
FOOTER = struct.Struct(">QQI4s")

Compactor = Callable[[bytes, int], bytes | None]


@dataclass(frozen=True, eq=False)
class CanonicalUpload(KeyedUpload):
    """A canonical snapshot of one backend: what its synchronous part froze, and the
    file (`path`, in `snapshot_dir`) that its asynchronous part writes."""

    tables: dict[str, FrozenTable]
    metas: dict[str, StateMeta]
    compactors: dict[str, Compactor]
    key_groups: range
    now_ms: int
    path: str
    snapshot_dir: str

    def run(self, storage: CheckpointStorage) -> CanonicalKeyedHandle:
        try:
            return write_canonical(storage, self)
        finally:
            self.cancel()

    def cancel(self) -> None:
        for table in self.tables.values():
            table.release()


@dataclass(frozen=True)
class Section:
    key_group: int
    offset: int
    length: int
    crc32: int
    sha256: str  # hex


@dataclass(frozen=True)
class CanonicalIndex:
    states: dict[str, StateMeta]
    sections: dict[str, list[Section]]

    def sections_in(self, state: str, key_groups: range) -> list[Section]:
        sections = self.sections.get(state, [])
        groups = [s.key_group for s in sections]
        low = bisect.bisect_left(groups, key_groups.start)
        high = bisect.bisect_left(groups, key_groups.stop)
        return sections[low:high]


def _section(table: FrozenTable, key_group: int, compact: Compactor | None, now_ms: int) -> bytes:
    out = bytearray()
    for rest, stored in table.entries(key_group):
        data = stored if compact is None else compact(stored, now_ms)
        if data is None:
            continue
        out += encode_varint(len(rest))
        out += rest
        out += encode_varint(len(data))
        out += data
    return bytes(out)


def write_canonical(storage: CheckpointStorage, frozen: CanonicalUpload) -> CanonicalKeyedHandle:
    """The asynchronous part of a canonical snapshot: stream `frozen` into its file."""
    tables = frozen.tables
    index_sha256 = ""

    def chunks() -> Iterator[bytes]:
        nonlocal index_sha256
        offset = len(MAGIC)
        yield MAGIC
        sections: dict[str, list[list[int | str]]] = {}
        for name in sorted(tables):
            rows = sections[name] = []
            compact = frozen.compactors.get(name)
            for group in frozen.key_groups:
                data = _section(tables[name], group, compact, frozen.now_ms)
                if data:
                    rows.append(
                        [group, offset, len(data), zlib.crc32(data), hashlib.sha256(data).hexdigest()]
                    )
                    offset += len(data)
                    yield data
        states = {name: frozen.metas[name].to_json() for name in sorted(tables)}
        index = json.dumps({"states": states, "sections": sections}).encode("utf-8")
        index_sha256 = hashlib.sha256(index).hexdigest()
        yield index
        yield FOOTER.pack(offset, len(index), zlib.crc32(index), END_MAGIC)

    ref = storage.write_file(frozen.path, chunks(), frozen.snapshot_dir)
    return CanonicalKeyedHandle(frozen.key_groups, ref, index_sha256)


class CanonicalSnapshotStrategy(KeyedSnapshotStrategy):
    """Full snapshots in the canonical format, of any backend: every savepoint,
    and the checkpoints of backends without a format of their own."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend

    def snapshot(self, checkpoint_id: int, snapshot_dir: str, subtask_path: str) -> CanonicalUpload:
        backend = self._backend
        return CanonicalUpload(
            backend.freeze(),
            dict(backend.metas),
            backend.compactors(),
            backend.key_groups,
            backend.clock.now_ms(),
            posixpath.join(snapshot_dir, subtask_path, "keyed"),
            snapshot_dir,
        )


def read_index(storage: CheckpointStorage, path: str, size: int, index_sha256: str) -> CanonicalIndex:
    storage.check_size(path, size)
    if size < len(MAGIC) + FOOTER.size:
        raise SnapshotCorruptError(path, f"too short for a canonical snapshot ({size} bytes)")
    if storage.fs.cat_file(path, start=0, end=len(MAGIC)) != MAGIC:
        raise SnapshotCorruptError(path, "bad header: not a canonical snapshot, or damaged")
    footer = storage.fs.cat_file(path, start=size - FOOTER.size, end=size)
    index_offset, index_length, index_crc, magic = FOOTER.unpack(footer)
    if magic != END_MAGIC or index_offset + index_length + FOOTER.size != size:
        raise SnapshotCorruptError(path, "bad footer: not a canonical snapshot, or damaged")
    raw = storage.fs.cat_file(path, start=index_offset, end=index_offset + index_length)
    if zlib.crc32(raw) != index_crc:
        raise SnapshotCorruptError(path, "index checksum mismatch")
    if hashlib.sha256(raw).hexdigest() != index_sha256:
        raise SnapshotCorruptError(path, "index SHA-256 mismatch: not the file this job wrote")
    index: dict[str, Any] = json.loads(raw)
    return CanonicalIndex(
        states={name: StateMeta.from_json(m) for name, m in index["states"].items()},
        sections={name: [Section(*row) for row in rows] for name, rows in index["sections"].items()},
    )


def _records(path: str, data: bytes) -> Iterator[tuple[bytes, bytes]]:
    view = memoryview(data)
    pos = 0
    end = len(data)
    # A section whose checksum matched is malformed only if it was written so;
    # still, never take a half-parsed section for whole.
    try:
        while pos < end:
            length, pos = decode_varint(view, pos)
            rest = bytes(view[pos : pos + length])
            pos += length
            length, pos = decode_varint(view, pos)
            value = bytes(view[pos : pos + length])
            pos += length
            yield rest, value
    except IndexError:
        raise SnapshotCorruptError(path, "malformed section") from None
    if pos != end:
        raise SnapshotCorruptError(path, "malformed section")


def _read_section(stream: IO[bytes], path: str, section: Section) -> bytes:
    stream.seek(section.offset)
    data = stream.read(section.length)
    if len(data) != section.length or zlib.crc32(data) != section.crc32:
        raise SnapshotCorruptError(path, f"section of key group {section.key_group} fails its checksum")
    if hashlib.sha256(data).hexdigest() != section.sha256:
        raise SnapshotCorruptError(path, f"section of key group {section.key_group} fails its SHA-256")
    return data


def open_canonical(
    storage: CheckpointStorage, snapshot_dir: str, handle: CanonicalKeyedHandle
) -> tuple[str, CanonicalIndex]:
    """The path of `handle`'s file and its index, checked against the handle."""
    path = storage.resolve(snapshot_dir, handle.file)
    return path, read_index(storage, path, handle.file.size, handle.index_sha256)


def read_sections(
    stream: IO[bytes], path: str, index: CanonicalIndex, state: str, key_groups: range
) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
    """The `(rest, data)` records of `state` in each of `key_groups` that has any, each
    section checked against its checksums as it is read."""
    for section in index.sections_in(state, key_groups):
        yield section.key_group, list(_records(path, _read_section(stream, path, section)))


def restore_canonical(
    storage: CheckpointStorage, snapshot_dir: str, handle: CanonicalKeyedHandle, backend: KeyedStateBackend
) -> None:
    """Load the key groups `backend` owns from `handle`."""
    own = range(
        max(handle.key_groups.start, backend.key_groups.start),
        min(handle.key_groups.stop, backend.key_groups.stop),
    )
    if not own:
        return
    path, index = open_canonical(storage, snapshot_dir, handle)
    with storage.open_read(path) as stream:
        for name, meta in index.states.items():
            backend.add_restored_meta(name, meta)
            for key_group, records in read_sections(stream, path, index, name, own):
                backend.load(name, meta, key_group, records)
