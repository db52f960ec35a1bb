"""Native incremental RocksDB snapshots.

The synchronous part is a RocksDB checkpoint (hard links, after a memtable
flush). The asynchronous part uploads the SST files that no completed
checkpoint uploaded before into `<job>/shared/` and the small private files
(MANIFEST, CURRENT, OPTIONS, WAL) into the checkpoint's own directory. SST
files are immutable, so a file uploaded once is referenced again by later
checkpoints; only files confirmed by a *completed* checkpoint are reused, so
nothing references an upload of an aborted one.

Local recovery: the local checkpoint of the latest upload is kept (hard links)
instead of deleted, with each SST file's checksums and, where the upload's
read proves it (`file_identity.py`), the identity of the file they were
computed from; the backend leaves it for the next restore on this machine when
it closes (`local_recovery.py`).

Threads: the synchronous part and the notifications of completed or aborted
checkpoints run on the task's chain thread, uploads on upload threads, so
that records keep flowing. An upload never writes the strategy's records of
checkpoints: it hands its files over in its own `NativeUpload.uploaded`, set
once when it has finished, and the strategy reads them from there when the
checkpoint completes. An upload sends up to four files at once. What the
strategy keeps is changed under its lock only.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import rocksdict
from lockgate.runtime.backends.rocksdb.file_identity import FileIdentity, witnessed
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef
from lockgate.runtime.snapshot.strategy import KeyedSnapshotStrategy, KeyedUpload

if TYPE_CHECKING:
    from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend

# Files uploaded at once: one file's reading overlaps another's checksums and writing
# (each releases the GIL on its 4 MiB chunks).
UPLOAD_THREADS = 4


@dataclass(frozen=True)
class SharedFile:
    """An uploaded SST file, by absolute path in checkpoint storage; `identity`: the
    local file's while its checksums were computed from it, if that proves it
    unchanged since (`file_identity.py`)."""

    path: str
    size: int
    crc32: int
    sha256: str
    identity: FileIdentity | None = None

    def ref_from(self, snapshot_dir: str) -> FileRef:
        return FileRef(posixpath.relpath(self.path, snapshot_dir), self.size, self.crc32, self.sha256)


class NativeUpload(KeyedUpload):
    """The asynchronous part of one native snapshot."""

    def __init__(
        self,
        strategy: NativeSnapshotStrategy,
        checkpoint_id: int,
        local_dir: Path,
        target_dir: str,
        subtask_path: str,
        *,
        reusable: Mapping[str, SharedFile],
    ) -> None:
        self._strategy = strategy
        self._checkpoint_id = checkpoint_id
        self._local_dir = local_dir
        self._target_dir = target_dir
        self._subtask_path = subtask_path
        self._states = dict(strategy.backend.metas)
        self._key_groups = strategy.backend.key_groups
        self._reusable = reusable
        self.uploaded: Mapping[str, SharedFile] | None = None
        """The SST files this checkpoint references, by local name; set once the upload is done."""

    def run(self, storage: CheckpointStorage) -> NativeKeyedHandle:
        try:
            names = sorted(os.listdir(self._local_dir))
            with ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="native-upload") as pool:
                ssts = [n for n in names if n.endswith(".sst")]
                privates = [n for n in names if not n.endswith(".sst")]
                uploaded = dict(zip(ssts, pool.map(functools.partial(self._sst, storage), ssts), strict=True))
                private = dict(
                    zip(privates, pool.map(functools.partial(self._private, storage), privates), strict=True)
                )
            shared = {name: known.ref_from(self._target_dir) for name, known in uploaded.items()}
            self.uploaded = MappingProxyType(uploaded)
            handle = NativeKeyedHandle(self._key_groups, self._states, shared, private)
        except BaseException:
            self.cancel()
            raise
        self._strategy.keep_local(self._checkpoint_id, self._local_dir, self.uploaded)
        return handle

    def _sst(self, storage: CheckpointStorage, name: str) -> SharedFile:
        """An SST file of this checkpoint in shared storage: uploaded unless a completed checkpoint did."""
        shared_dir = posixpath.normpath(posixpath.join(posixpath.dirname(self._target_dir), "shared"))
        known = self._reusable.get(name)
        if known is not None and posixpath.dirname(known.path) == shared_dir:
            return known
        # Unique per upload: cleaning up an aborted checkpoint's files can never
        # delete what a later checkpoint uploaded.
        path = posixpath.join(
            shared_dir, f"{self._strategy.backend.instance_id}-{self._checkpoint_id}-{name}"
        )
        local = str(self._local_dir / name)
        ref, identity = witnessed(local, functools.partial(storage.upload, local, path, self._target_dir))
        return SharedFile(path, ref.size, ref.crc32, ref.sha256, identity)

    def _private(self, storage: CheckpointStorage, name: str) -> FileRef:
        path = posixpath.join(self._target_dir, self._subtask_path, "native", name)
        return storage.upload(str(self._local_dir / name), path, self._target_dir)

    def cancel(self) -> None:
        shutil.rmtree(self._local_dir, ignore_errors=True)


class NativeSnapshotStrategy(KeyedSnapshotStrategy):
    """Incremental snapshots of one RocksDB backend, across its checkpoints."""

    def __init__(self, backend: RocksDBKeyedStateBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        # The SST files of the latest completed checkpoint, which the next ones reuse.
        self._confirmed: Mapping[str, SharedFile] = MappingProxyType({})
        self._in_flight: dict[int, NativeUpload] = {}
        # The local checkpoint of the latest upload, kept for local recovery. Its own
        # lock: an upload hands it over without waiting for the strategy's.
        self._kept_lock = threading.Lock()
        self._kept: KeptCheckpoint | None = None

    def snapshot(self, checkpoint_id: int, snapshot_dir: str, subtask_path: str) -> NativeUpload:
        """The synchronous part: a local RocksDB checkpoint of this instant."""
        local = self.backend.path.parent / f"chk-{checkpoint_id}-{self.backend.instance_id}"
        shutil.rmtree(local, ignore_errors=True)
        self.backend.flush_cached_writes()
        rocksdict.Checkpoint(self.backend.db).create_checkpoint(str(local))
        with self._lock:
            upload = NativeUpload(
                self, checkpoint_id, local, snapshot_dir, subtask_path, reusable=self._confirmed
            )
            self._in_flight[checkpoint_id] = upload
        return upload

    def notify_complete(self, checkpoint_id: int) -> None:
        with self._lock:
            upload = self._in_flight.pop(checkpoint_id, None)
            if upload is not None and upload.uploaded is not None:
                self._confirmed = upload.uploaded
            # Older checkpoints can complete no more: this one subsumes them.
            for older in [n for n in self._in_flight if n < checkpoint_id]:
                del self._in_flight[older]

    def seed(
        self, handle: NativeKeyedHandle, snapshot_dir: str, identities: Mapping[str, FileIdentity]
    ) -> None:
        """After restoring from `handle` as base, its SST files need no new upload;
        `identities`: those the restore proved the local files by."""
        confirmed = {
            name: SharedFile(
                posixpath.normpath(posixpath.join(snapshot_dir, ref.path)),
                ref.size,
                ref.crc32,
                ref.sha256,
                identities.get(name),
            )
            for name, ref in handle.shared.items()
        }
        with self._lock:
            self._confirmed = MappingProxyType(confirmed)

    def keep_local(self, checkpoint_id: int, directory: Path, files: Mapping[str, SharedFile]) -> None:
        """An upload finished: its local checkpoint is kept if it is the latest."""
        with self._kept_lock:
            kept = self._kept
            if kept is None or kept.checkpoint_id < checkpoint_id:
                self._kept, drop = KeptCheckpoint(checkpoint_id, directory, files), kept
            else:
                drop = KeptCheckpoint(checkpoint_id, directory, files)
        if drop is not None:
            shutil.rmtree(drop.directory, ignore_errors=True)

    def take_kept(self) -> KeptCheckpoint | None:
        """The kept local checkpoint, now the caller's (to leave for local recovery or delete)."""
        with self._kept_lock:
            kept, self._kept = self._kept, None
        return kept


@dataclass(frozen=True)
class KeptCheckpoint:
    """The local RocksDB checkpoint of an upload: its SST files, by local name, as uploaded."""

    checkpoint_id: int
    directory: Path
    files: Mapping[str, SharedFile]
