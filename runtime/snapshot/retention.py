"""Which shared SST files the retained checkpoints still need.

A shared file may be referenced by many incremental checkpoints; it can be
deleted once no retained checkpoint references it. A checkpoint still in
flight may have uploaded files that no `_metadata` names yet, so a file is
only ever deleted when the checkpoint that uploaded it (its id is in the
file's name, `<instance>-<checkpoint>-<sst>`) is neither newer than the
latest completed checkpoint nor still in flight.

One SST of one RocksDB instance may be in storage more than once: a snapshot
that starts before the previous checkpoint's completion notice reached its
task uploads again what that checkpoint uploaded. Which copy the next
snapshot reuses depends on which notices have arrived by then, so a copy is
kept while a retained checkpoint references any copy of the same SST. That
keeps whatever a snapshot in flight reuses: it references only SSTs live in
its database, and an SST live in it and in the older completed checkpoint it
reuses files of is live in every checkpoint between them, the latest
completed one (always retained) among them while checkpoints complete in order.
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


def sst_of(name: str) -> tuple[str, str] | None:
    """Which SST shared file `name` is a copy of: (RocksDB instance, SST file name)."""
    parts = name.split("-", 2)
    return (parts[0], parts[2]) if len(parts) == 3 and parts[1].isdigit() else None


def referenced_shared_files(storage: CheckpointStorage, job_id: str, retained: Iterable[int]) -> set[str]:
    """Absolute paths of the shared files the retained checkpoints reference."""
    referenced: set[str] = set()
    for checkpoint_id in retained:
        snapshot_dir = storage.checkpoint_dir(job_id, checkpoint_id)
        for vertex in read_metadata(storage, snapshot_dir).vertices.values():
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
    keep = {sst_of(posixpath.basename(p)) for p in referenced_shared_files(storage, job_id, retained)}
    untouchable = set(in_flight)
    shared = storage.shared_dir(job_id)
    doomed = []
    for name in storage.list_names(shared):
        uploader = uploaded_by(name)
        if uploader is None or uploader > latest_completed or uploader in untouchable:
            continue
        if sst_of(name) not in keep:
            doomed.append(posixpath.join(shared, name))
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
