"""The snapshots of a job that checkpoint storage holds, read from storage alone:
what `lockgate checkpoints --dir` lists once the run and its etcd are gone.

A checkpoint is `<root>/<job>/chk-<n>/`, a savepoint `<root>/savepoint-<id>/`
(whose `_metadata` names its job). Each is complete only with a readable
`_metadata` (written last); one without is listed with what is wrong, never
hidden. What etcd adds — checkpoints a restore found damaged and marked
unusable, completion times — is not known here.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage, SnapshotCorruptError

_CHECKPOINT = re.compile(r"^chk-(\d+)$")
_SAVEPOINT = re.compile(r"^savepoint-[^/]+$")


@dataclass(frozen=True)
class StoredSnapshot:
    url: str
    metadata: CheckpointMetadata | None
    problem: str | None = None  # why there is no metadata: incomplete, damaged

    @property
    def checkpoint_id(self) -> int | None:
        if self.metadata is not None:
            return self.metadata.checkpoint_id
        match = _CHECKPOINT.match(posixpath.basename(self.url.rstrip("/")))
        return int(match[1]) if match else None


def stored_snapshots(url: str, job_id: str) -> list[StoredSnapshot]:
    """The job's checkpoints and savepoints under `url` (a checkpoint or savepoint
    directory, or one snapshot's own), by checkpoint id; the ones whose id is
    unreadable last."""
    storage = CheckpointStorage(url)
    job_dir = storage.job_dir(job_id)
    found = [
        _read(storage, posixpath.join(job_dir, name))
        for name in storage.list_names(job_dir)
        if _CHECKPOINT.match(name)
    ]
    names = storage.list_names(storage.root)
    savepoints = [posixpath.join(storage.root, name) for name in names if _SAVEPOINT.match(name)]
    if METADATA in names:
        savepoints.append(storage.root)  # `url` names one snapshot itself
    for directory in savepoints:
        snapshot = _read(storage, directory)
        if snapshot.metadata is None or snapshot.metadata.job_id == job_id:
            found.append(snapshot)
    return sorted(found, key=lambda s: (s.checkpoint_id is None, s.checkpoint_id or 0, s.url))


def _read(storage: CheckpointStorage, directory: str) -> StoredSnapshot:
    url = storage.fs.unstrip_protocol(directory)
    try:
        return StoredSnapshot(url, read_metadata(storage, directory))
    except (SnapshotCorruptError, ValueError, KeyError, TypeError) as error:
        # Missing or damaged `_metadata`, or one of another format: listed, not restorable.
        return StoredSnapshot(url, None, f"{type(error).__name__}: {error}")
