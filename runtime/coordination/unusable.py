"""Completed checkpoints found damaged, recorded in etcd (`checkpoints/unusable/<n>`).

A checkpoint is marked when a restore finds one of its files missing, truncated
or failing its checksum: the driver verifying it before a launch, or a task
reading it (its failure names the file). Every later resolution — this
driver's next launch, a new driver, `lockgate checkpoints list` — sees the mark
and skips the checkpoint without reading it again, so a damaged checkpoint is
never restored twice.

The mark names the checkpoint's path as well as its id: a mark applies only to
the directory it was found in. It is a finding about storage, not a decision of
a coordinator, so it is written without the coordinator's guard (a task's
finding reaches the driver after its launch's coordinator closed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.records import decode, encode


@dataclass(frozen=True)
class UnusableCheckpoint:
    """What `checkpoints/unusable/<n>` holds."""

    checkpoint_id: int
    path: str
    reason: str
    found_ms: int

    def applies_to(self, checkpoint_id: int, path: str) -> bool:
        return self.checkpoint_id == checkpoint_id and self.path == path


class UnusableCheckpoints:
    def __init__(self, store: KeyValueStore, keys: JobKeys) -> None:
        self._store = store
        self._keys = keys

    async def mark(self, checkpoint_id: int, path: str, reason: str) -> None:
        mark = UnusableCheckpoint(checkpoint_id, path, reason, int(time.time() * 1000))
        await self._store.put(self._keys.unusable_of(checkpoint_id), encode(mark))

    async def all(self) -> dict[int, UnusableCheckpoint]:
        rows = await self._store.get_prefix(self._keys.unusable)
        marks = (decode(UnusableCheckpoint, value) for _, value in rows)
        return {mark.checkpoint_id: mark for mark in marks}
