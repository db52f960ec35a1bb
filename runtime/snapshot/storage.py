"""Checkpoint storage over fsspec, and checksummed files in it.

Layout (docs/architecture.md, Snapshots):

    <root>/<job-id>/chk-<n>/_metadata           written last; its presence = complete
    <root>/<job-id>/chk-<n>/<vertex>/<subtask>…  per-subtask state files
    <root>/<job-id>/shared/…                     SST files of incremental checkpoints
    <savepoint-dir>/savepoint-<id>/              self-contained and relocatable

Every data file is described by a `FileRef` (path relative to its snapshot
directory, size, CRC-32 and SHA-256) kept in `_metadata`; reads verify them and
name the file when they disagree. `_metadata` is signed with the job's key
(`snapshot_key.py`), so a file that matches its SHA-256 is the file the job
wrote: nobody who can only write to the storage can substitute another.
"""

from __future__ import annotations

import functools
import hashlib
import posixpath
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import fsspec
from lockgate.runtime.failure_class import FailureClass

CHUNK = 4 * 1024 * 1024
METADATA = "_metadata"


class SnapshotCorruptError(RuntimeError):
    """A snapshot file is missing, truncated or does not match its checksum."""

    failure_class = FailureClass.RESTORE

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
    sha256: str  # hex

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "crc32": self.crc32, "sha256": self.sha256}

    @staticmethod
    def from_json(data: dict[str, Any]) -> FileRef:
        return FileRef(str(data["path"]), int(data["size"]), int(data["crc32"]), str(data["sha256"]))


def _within(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


class Digest:
    """Size, CRC-32 and SHA-256 of bytes seen a chunk at a time."""

    def __init__(self) -> None:
        self.size = 0
        self.crc32 = 0
        self._sha256 = hashlib.sha256()

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.size += len(data)
        self.crc32 = zlib.crc32(data, self.crc32)
        self._sha256.update(data)

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    def check(self, path: str, ref: FileRef) -> None:
        """Raises SnapshotCorruptError naming `path` unless these bytes are `ref`'s."""
        if self.size != ref.size:  # it changed between a size check and the read
            raise SnapshotCorruptError(path, f"read {self.size} bytes, expected {ref.size}")
        if self.crc32 != ref.crc32:
            raise SnapshotCorruptError(path, "checksum mismatch")
        if self.sha256 != ref.sha256:
            raise SnapshotCorruptError(path, "SHA-256 mismatch: not the file this job wrote")


class CheckpointStorage:
    """One fsspec filesystem and a root path under it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url)
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
        digest = Digest()
        with self.fs.open(path, "wb") as stream:
            for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
                stream.write(chunk)
                digest.update(chunk)
        return FileRef(posixpath.relpath(path, relative_to), digest.size, digest.crc32, digest.sha256)

    def upload(self, local_path: str, path: str, relative_to: str) -> FileRef:
        with open(local_path, "rb") as source:
            return self.write_file(path, iter(functools.partial(source.read, CHUNK), b""), relative_to)

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
        """The whole file, verified against its size and checksums."""
        path = self.resolve(snapshot_dir, ref)
        self.check_size(path, ref.size)
        data: bytes = self.fs.cat_file(path)
        digest = Digest()
        digest.update(data)
        digest.check(path, ref)
        return data

    def download(self, snapshot_dir: str, ref: FileRef, local_path: str) -> None:
        """Copy a file to local disk, verifying it on the way."""
        with open(local_path, "wb") as target:
            self.verify_file(snapshot_dir, ref, target.write)

    def verify_file(
        self, snapshot_dir: str, ref: FileRef, consume: Callable[[bytes], object] | None = None
    ) -> None:
        """Read the whole file, a chunk at a time (each to `consume`), and check its size and checksums."""
        path = self.resolve(snapshot_dir, ref)
        self.check_size(path, ref.size)
        digest = Digest()
        with self.open_read(path) as source:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                if consume is not None:
                    consume(chunk)
        digest.check(path, ref)

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
