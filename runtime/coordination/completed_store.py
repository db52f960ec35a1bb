"""Completed checkpoints in etcd, and the retention of the N most recent.

Savepoints are recorded like checkpoints (a restart may restore from one) but
their files belong to the user: retention forgets their etcd summary once a
newer checkpoint is retained and never deletes their directory; their results
(`savepoints/results/<id>`) stay. A checkpoint found damaged is marked
(`unusable`); the mark goes when its summary does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from lockgate.runtime.coordination.errors import CoordinatorFencedError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import (
    Compare,
    Delete,
    DeletePrefix,
    KeyValueStore,
    Operation,
    Put,
)
from lockgate.runtime.coordination.records import CompletedCheckpoint, SavepointResult, decode, encode
from lockgate.runtime.coordination.unusable import UnusableCheckpoints
from lockgate.runtime.snapshot.retention import delete_unreferenced_shared_files
from lockgate.runtime.snapshot.storage import CheckpointStorage

log = logging.getLogger(__name__)


class CompletedCheckpointStore:
    def __init__(
        self, store: KeyValueStore, keys: JobKeys, storage: CheckpointStorage, retained: int
    ) -> None:
        if retained < 1:
            raise ValueError(f"at least one completed checkpoint must be retained, got {retained}")
        self._store = store
        self.keys: Final = keys
        self._storage = storage
        self.retained = retained
        self.unusable = UnusableCheckpoints(store, keys)

    async def all(self) -> list[CompletedCheckpoint]:
        rows = await self._store.get_prefix(self.keys.completed)
        return sorted(
            (decode(CompletedCheckpoint, value) for _, value in rows), key=lambda c: c.checkpoint_id
        )

    async def savepoint_results(self) -> list[SavepointResult]:
        """The answer to every savepoint request the job's drivers served."""
        rows = await self._store.get_prefix(self.keys.savepoint_results)
        return [decode(SavepointResult, value) for _, value in rows]

    async def latest_id(self) -> int | None:
        data = await self._store.get(self.keys.latest)
        return None if data is None else int(data)

    def completion_ops(self, summary: CompletedCheckpoint, newest: bool) -> list[Operation]:
        """The writes that complete a checkpoint, for one guarded transaction; `latest`
        moves only to a checkpoint newer than every one completed before (a savepoint
        triggered earlier may complete after a newer checkpoint)."""
        n = summary.checkpoint_id
        latest = [Put(self.keys.latest, str(n).encode())] if newest else []
        return [
            Put(self.keys.completed_of(n), encode(summary)),
            *latest,
            DeletePrefix(self.keys.acks_of(n)),
        ]

    async def _discard(self, guard: Compare, summary: CompletedCheckpoint) -> None:
        """Drop a summary from etcd, only while `guard` (the coordinator leads) holds
        (a deposed coordinator must not decide what its successor may restore), then
        a checkpoint's directory (a savepoint's files are the user's)."""
        n = summary.checkpoint_id
        # Its mark (if it was found damaged) goes with it.
        forget = [Delete(self.keys.completed_of(n)), Delete(self.keys.unusable_of(n))]
        if not await self._store.transaction([guard], forget):
            raise CoordinatorFencedError(
                f"the coordinator was replaced; checkpoint {n} is left to its successor"
            )
        if summary.kind == "checkpoint":
            directory = self._storage.checkpoint_dir(self.keys.job, n)
            await asyncio.to_thread(self._storage.delete, directory, True)

    async def discard_old(self, in_flight: set[int], guard: Compare) -> None:
        """Forget checkpoints beyond the retained ones; delete their files and the
        shared files no retained checkpoint references (never those of checkpoints
        `in_flight`). Each summary is forgotten under `guard` before its files go."""
        completed = await self.all()
        keep = [c for c in completed if c.kind == "checkpoint"][-self.retained :]
        oldest_kept = keep[0].checkpoint_id if keep else 0
        old = [c for c in completed if c.checkpoint_id < oldest_kept]
        for summary in old:
            await self._discard(guard, summary)
        discarded = [c.checkpoint_id for c in old]
        if discarded:
            deleted = await asyncio.to_thread(
                delete_unreferenced_shared_files,
                self._storage,
                self.keys.job,
                [c.checkpoint_id for c in keep],
                completed[-1].checkpoint_id,
                in_flight,
            )
            log.info("retention discarded checkpoints %s and %d shared files", discarded, len(deleted))

    async def discard_all(self, guard: Compare) -> None:
        """Forget every completed checkpoint and savepoint of the job and delete the
        checkpoints' files, shared ones included (savepoint files are the user's).
        For starting a job over from empty state, under `guard` as `discard_old`."""
        completed = await self.all()
        for summary in completed:
            await self._discard(guard, summary)
        forget: list[Operation] = [Delete(self.keys.latest), DeletePrefix(self.keys.unusable)]
        if not await self._store.transaction([guard], forget):
            raise CoordinatorFencedError("the coordinator was replaced while it discarded checkpoints")
        await asyncio.to_thread(self._storage.delete, self._storage.shared_dir(self.keys.job), True)
