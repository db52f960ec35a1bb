"""Checkpoint storage over fsspec, and checksummed files in it.

Layout (DESIGN.md):

    <root>/<job-id>/chk-<n>/_metadata           written last; its presence = complete
    <root>/<job-id>/chk-<n>/<vertex>/<subtask>…  per-subtask state files
    <root>/<job-id>/shared/…                     SST files of incremental checkpoints
    <savepoint-dir>/savepoint-<id>/              self-contained and relocatable

Every data file is described by a `FileRef` (path relative to its snapshot
directory, size, CRC-32) kept in `_metadata`; reads verify both and name the
file when they disagree.
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import fsspec

CHUNK = 4 * 1024 * 1024
METADATA = "_metadata"


class SnapshotCorruptError(RuntimeError):
    """A snapshot file is missing, truncated or does not match its checksum."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{self.naming(path)}{problem}")
        self.path = path

    @staticmethod
    def naming(path: str) -> str:
        """How the message begins: a failure that reached the driver only as text (a
        Spark task's) is recognised as this file's by it."""
        return f"snapshot file {path}: "


@dataclass(frozen=True)
class FileRef:
    """A file of a snapshot: `path` is relative to the snapshot's directory."""

    path: str
    size: int
    crc32: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "crc32": self.crc32}

    @staticmethod
    def from_json(data: dict[str, Any]) -> FileRef:
        return FileRef(str(data["path"]), int(data["size"]), int(data["crc32"]))


def _within(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


class ChecksumWriter:
    """A write stream that counts bytes and computes their CRC-32 on the way."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.size = 0
        self.crc32 = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._stream.write(data)
        self.size += len(data)
        self.crc32 = zlib.crc32(data, self.crc32)


class CheckpointStorage:
    """One fsspec filesystem and a root path under it."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.fs: Any = fs
        self.root = root.rstrip("/") or "/"

    # -- the layout --------------------------------------------------------------

    def job_dir(self, job_id: str) -> str:
        return posixpath.join(self.root, job_id)

    def checkpoint_dir(self, job_id: str, checkpoint_id: int) -> str:
        return posixpath.join(self.root, job_id, f"chk-{checkpoint_id}")

    def shared_dir(self, job_id: str) -> str:
        return posixpath.join(self.root, job_id, "shared")

    def savepoint_dir(self, savepoint_id: str) -> str:
        return posixpath.join(self.root, f"savepoint-{savepoint_id}")

    def resolve(self, snapshot_dir: str, ref: FileRef | str) -> str:
        """Where a file `_metadata` names lives: inside the snapshot's directory, or in
        the shared directory beside it (`<job>/shared`, SST files of incremental
        checkpoints). Anything else — an absolute path, a URL, a path that climbs out —
        is refused before a byte is read: `_metadata` decides what a restore reads."""
        relative = ref.path if isinstance(ref, FileRef) else ref
        path = posixpath.normpath(posixpath.join(snapshot_dir, relative))
        shared = posixpath.join(posixpath.dirname(snapshot_dir), "shared")
        inside = _within(path, snapshot_dir) or _within(path, shared)
        if posixpath.isabs(relative) or "://" in relative or not inside:
            raise SnapshotCorruptError(
                posixpath.join(snapshot_dir, METADATA),
                f"names file {relative!r}, outside the snapshot directory {snapshot_dir} and its "
                f"job's shared directory {shared}; a snapshot reads only its own files, so it is refused",
            )
        return path

    # -- writing -------------------------------------------------------------------

    def write_file(self, path: str, chunks: Iterator[bytes] | bytes, relative_to: str) -> FileRef:
        """Write `chunks` to `path`; the returned ref is relative to `relative_to`."""
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with self.fs.open(path, "wb") as stream:
            writer = ChecksumWriter(stream)
            for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
                writer.write(chunk)
        return FileRef(posixpath.relpath(path, relative_to), writer.size, writer.crc32)

    def upload(self, local_path: str, path: str, relative_to: str) -> FileRef:
        def chunks() -> Iterator[bytes]:
            with open(local_path, "rb") as source:
                while chunk := source.read(CHUNK):
                    yield chunk

        return self.write_file(path, chunks(), relative_to)

    # -- reading -------------------------------------------------------------------

    def check_size(self, path: str, expected: int) -> None:
        try:
            size = int(self.fs.size(path))
        except FileNotFoundError:
            raise SnapshotCorruptError(path, "missing") from None
        if size != expected:
            problem = "truncated" if size < expected else "longer than recorded"
            raise SnapshotCorruptError(path, f"{problem}: {size} bytes, expected {expected}")

    def read_file(self, snapshot_dir: str, ref: FileRef) -> bytes:
        """The whole file, verified against its size and checksum."""
        path = self.resolve(snapshot_dir, ref)
        self.check_size(path, ref.size)
        data: bytes = self.fs.cat_file(path)
        if zlib.crc32(data) != ref.crc32:
            raise SnapshotCorruptError(path, "checksum mismatch")
        return data

    def download(self, snapshot_dir: str, ref: FileRef, local_path: str) -> None:
        """Copy a file to local disk, verifying it on the way."""
        with open(local_path, "wb") as target:
            self._read_verified(snapshot_dir, ref, target.write)

    def verify_file(self, snapshot_dir: str, ref: FileRef) -> None:
        """Read the whole file, a chunk at a time, and check its size and CRC-32."""
        self._read_verified(snapshot_dir, ref, None)

    def _read_verified(
        self, snapshot_dir: str, ref: FileRef, consume: Callable[[bytes], object] | None
    ) -> None:
        path = self.resolve(snapshot_dir, ref)
        self.check_size(path, ref.size)
        crc = size = 0
        with self.open_read(path) as source:
            while chunk := source.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
                if consume is not None:
                    consume(chunk)
        if size != ref.size:  # it changed between the size check and the read
            raise SnapshotCorruptError(path, f"read {size} bytes, expected {ref.size}")
        if crc != ref.crc32:
            raise SnapshotCorruptError(path, "checksum mismatch")

    def open_read(self, path: str) -> IO[bytes]:
        try:
            stream: IO[bytes] = self.fs.open(path, "rb")
        except FileNotFoundError:
            raise SnapshotCorruptError(path, "missing") from None
        return stream

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def list_names(self, directory: str) -> list[str]:
        # Tasks in other processes write here: a listing cached in this one is stale.
        self.fs.invalidate_cache(directory)
        if not self.fs.exists(directory):
            return []
        return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(directory, detail=False))

    def delete(self, path: str, recursive: bool = False) -> None:
        if self.fs.exists(path):
            self.fs.rm(path, recursive=recursive)
