"""Which shared SST files the retained checkpoints still need.

A shared file may be referenced by many incremental checkpoints; it can be
deleted once no retained checkpoint references it. Files uploaded by a
checkpoint still in flight are in no `_metadata` yet: the caller passes them
as `protected` (the coordinator knows them) so they are never taken.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage


def referenced_shared_files(storage: CheckpointStorage, job_id: str, retained: Iterable[int]) -> set[str]:
    """Absolute paths of the shared files the retained checkpoints reference."""
    referenced: set[str] = set()
    for checkpoint_id in retained:
        snapshot_dir = storage.checkpoint_dir(job_id, checkpoint_id)
        metadata = read_metadata(storage, snapshot_dir)
        for vertex in metadata.vertices.values():
            for subtask in vertex.subtasks:
                if isinstance(subtask.keyed, NativeKeyedHandle):
                    for ref in subtask.keyed.shared.values():
                        referenced.add(storage.resolve(snapshot_dir, ref))
    return referenced


def unreferenced_shared_files(
    storage: CheckpointStorage,
    job_id: str,
    retained: Iterable[int],
    protected: Iterable[str] = (),
) -> list[str]:
    keep = referenced_shared_files(storage, job_id, retained) | set(protected)
    shared = storage.shared_dir(job_id)
    return [
        path
        for path in (posixpath.join(shared, name) for name in storage.list_names(shared))
        if path not in keep
    ]


def delete_unreferenced_shared_files(
    storage: CheckpointStorage,
    job_id: str,
    retained: Iterable[int],
    protected: Iterable[str] = (),
) -> list[str]:
    """Delete and return the shared files no retained checkpoint needs."""
    doomed = unreferenced_shared_files(storage, job_id, retained, protected)
    for path in doomed:
        storage.delete(path)
    return doomed
