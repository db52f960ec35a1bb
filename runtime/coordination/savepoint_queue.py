"""Savepoint requests from etcd, served one at a time and once per request id.

The operator or the CLI writes `savepoints/requests/<id>`, bound to a lease
that lapses when the requester stops waiting, so a request nobody served in
time cannot stop a later launch by surprise. The coordinator takes a canonical
savepoint into a directory of its own, `<dir>/savepoint-<id>-<random>`, created
for that attempt alone (an abort deletes it and nothing else; a repeated id never
touches an older savepoint), and writes `savepoints/results/<id>` while it still
leads the job. A request that already has a final result is not served again; a
second request waits for the first to finish.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from fsspec.core import split_protocol
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.errors import CheckpointAbortedError, CoordinatorFencedError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore, Operation, Put
from lockgate.runtime.coordination.records import (
    CompletedCheckpoint,
    SavepointRequest,
    SavepointResult,
    decode,
    encode,
)
from lockgate.runtime.snapshot.metadata import SnapshotKind
from lockgate.runtime.storage_url import PROCESS_LOCAL, StorageUrlError, check_storage_url

log = logging.getLogger(__name__)

TriggerFn = Callable[[SnapshotKind, str | None, bool], "asyncio.Future[CompletedCheckpoint]"]
GuardedWrite = Callable[[list[Operation]], Awaitable[bool]]
"""Writes the operations only while the coordinator leads; False once it does not."""


class SavepointQueue:
    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        trigger: TriggerFn,
        on_stop: Callable[[str], None],
        default_dir: str | None,
        *,
        guarded: GuardedWrite,
    ) -> None:
        self._store = store
        self._guarded = guarded
        self._keys = keys
        self._trigger = trigger
        self._on_stop = on_stop
        self._default_dir = default_dir
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._seen: set[str] = set()

    @property
    def received(self) -> frozenset[str]:
        """The ids of every request this queue has taken in, served or waiting."""
        return frozenset(self._seen)

    def _offer(self, key: bytes) -> None:
        request_id = key[len(self._keys.savepoint_requests) :].decode()
        if request_id not in self._seen:
            self._seen.add(request_id)
            self._queue.put_nowait(request_id)

    async def run(self) -> None:
        requests, revision = await self._store.get_prefix_at(self._keys.savepoint_requests)
        for key, _ in requests:
            self._offer(key)
        watcher = asyncio.create_task(self._watch(revision + 1), name="savepoint-requests")
        try:
            while True:
                await self._serve(await self._queue.get())
        finally:
            await cancel_and_wait([watcher], "closing the savepoint queue")

    async def _watch(self, start_revision: int) -> None:
        async for event in self._store.watch_prefix(self._keys.savepoint_requests, start_revision):
            if not event.deleted:
                self._offer(event.key)

    async def _result(self, request_id: str, result: SavepointResult) -> None:
        if not await self._guarded([Put(self._keys.savepoint_result(request_id), encode(result))]):
            raise CoordinatorFencedError(f"the coordinator was replaced while serving savepoint {request_id}")

    def _unshared(self, directory: str) -> str | None:
        """Why the tasks cannot all write `directory` (a relative path, memory:// in a
        run whose own savepoints are not), None when they can. `lockgate savepoint
        --dir` checks this too, but a request reaches the driver from whoever may write
        the job's keys: a stop into such a directory would leave nothing to restore."""
        default = self._default_dir
        in_one_process = default is not None and split_protocol(default)[0] in PROCESS_LOCAL
        try:
            check_storage_url(
                directory, process_local=in_one_process, protocol_known=False, on_this_host=False
            )
        except StorageUrlError as error:
            return str(error)
        return None

    async def _serve(self, request_id: str) -> None:
        existing = await self._store.get(self._keys.savepoint_result(request_id))
        if existing is not None and decode(SavepointResult, existing).status != "pending":
            return  # served before, by this coordinator or an earlier one
        data = await self._store.get(self._keys.savepoint_request(request_id))
        if data is None:
            return  # withdrawn
        request = decode(SavepointRequest, data)
        directory = request.dir or self._default_dir
        if directory is None:
            await self._result(
                request_id,
                SavepointResult("failed", error="no savepoint directory: set savepoints.dir or pass --dir"),
            )
            return
        unshared = self._unshared(directory)
        if unshared is not None:
            await self._result(request_id, SavepointResult("failed", error=unshared))
            log.error("savepoint request %s refused: %s", request_id, unshared)
            return
        target = f"{directory.rstrip('/')}/savepoint-{request_id}-{uuid.uuid4().hex[:8]}"
        await self._result(request_id, SavepointResult("pending", path=target))
        try:
            summary = await self._trigger("savepoint", target, request.stop)
        except CheckpointAbortedError as error:
            await self._result(request_id, SavepointResult("failed", error=str(error)))
            return
        await self._result(
            request_id,
            SavepointResult(
                "completed",
                path=target,
                checkpoint_id=summary.checkpoint_id,
                bytes=summary.bytes,
                metadata_sha256=summary.metadata_sha256,
            ),
        )
        log.info("savepoint %s complete at %s", request_id, target)
        if request.stop:
            self._on_stop(target)
