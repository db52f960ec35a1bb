"""Which shared SST files the retained checkpoints still need.

A shared file may be referenced by many incremental checkpoints; it can be
deleted once no retained checkpoint references it. A checkpoint still in
flight may have uploaded files that no `_metadata` names yet, so a file is
only ever deleted when the checkpoint that uploaded it (its id is in the
file's name, `<instance>-<checkpoint>-<sst>`) is neither newer than the
latest completed checkpoint nor still in flight.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage


def uploaded_by(name: str) -> int | None:
    """The checkpoint id that uploaded shared file `name`, or None if it is not ours."""
    parts = name.split("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


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
    latest_completed: int,
    in_flight: Iterable[int] = (),
) -> list[str]:
    retained = list(retained)
    keep = referenced_shared_files(storage, job_id, retained)
    untouchable = set(in_flight)
    shared = storage.shared_dir(job_id)
    doomed = []
    for name in storage.list_names(shared):
        uploader = uploaded_by(name)
        if uploader is None or uploader > latest_completed or uploader in untouchable:
            continue
        path = posixpath.join(shared, name)
        if path not in keep:
            doomed.append(path)
    return doomed


def delete_unreferenced_shared_files(
    storage: CheckpointStorage,
    job_id: str,
    retained: Iterable[int],
    latest_completed: int,
    in_flight: Iterable[int] = (),
) -> list[str]:
    """Delete and return the shared files no retained checkpoint needs."""
    doomed = unreferenced_shared_files(storage, job_id, retained, latest_completed, in_flight)
    for path in doomed:
        storage.delete(path)
    return doomed
