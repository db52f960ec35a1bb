"""Where a (re)started job restores from: an explicit savepoint, else the latest
completed checkpoint whose files are intact, else empty state."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestorePoint:
    url: str
    metadata: CheckpointMetadata

    @property
    def storage(self) -> CheckpointStorage:
        return CheckpointStorage(self.url)


def verify(url: str) -> RestorePoint:
    """Read `_metadata` and check every file it names exists with its recorded size.
    (Contents are checksummed as they are read during the restore itself.)"""
    storage = CheckpointStorage(url)
    metadata = read_metadata(storage, storage.root)
    for vertex in metadata.vertices.values():
        for subtask in vertex.subtasks:
            for handle in (subtask.keyed, subtask.operator):
                for ref in handle.files() if handle is not None else ():
                    storage.check_size(storage.resolve(storage.root, ref), ref.size)
    return RestorePoint(url, metadata)


async def resolve_restore_point(
    store: CompletedCheckpointStore, savepoint_url: str | None = None, min_id: int = 0
) -> RestorePoint | None:
    """The explicit savepoint, else the newest intact completed checkpoint numbered
    `min_id` or higher, else None."""
    if savepoint_url is not None:
        # The user named it: no silent fallback to something else.
        return await asyncio.to_thread(verify, savepoint_url)
    for summary in reversed([c for c in await store.all() if c.checkpoint_id >= min_id]):
        try:
            return await asyncio.to_thread(verify, summary.path)
        except SnapshotCorruptError as error:
            log.error("skipping %s %s for restore: %s", summary.kind, summary.checkpoint_id, error)
    return None
