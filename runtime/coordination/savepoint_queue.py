"""Savepoint requests from etcd, served one at a time and once per request id.

The operator or the CLI writes `savepoints/requests/<id>`; the coordinator
takes a canonical savepoint into `<dir>/savepoint-<id>` and writes
`savepoints/results/<id>`. A request that already has a final result is not
served again; a second request waits for the first to finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lockgate.runtime.coordination.errors import CheckpointAbortedError
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import (
    CompletedCheckpoint,
    SavepointRequest,
    SavepointResult,
    decode,
    encode,
)
from lockgate.runtime.snapshot.metadata import SnapshotKind

log = logging.getLogger(__name__)

TriggerFn = Callable[[SnapshotKind, str | None, bool], "asyncio.Future[CompletedCheckpoint]"]


class SavepointQueue:
    def __init__(
        self,
        etcd: Etcd,
        keys: JobKeys,
        trigger: TriggerFn,
        on_stop: Callable[[str], None],
        default_dir: str | None,
    ) -> None:
        self._etcd = etcd
        self._keys = keys
        self._trigger = trigger
        self._on_stop = on_stop
        self._default_dir = default_dir
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._seen: set[str] = set()

    def _offer(self, key: bytes) -> None:
        request_id = key[len(self._keys.savepoint_requests) :].decode()
        if request_id not in self._seen:
            self._seen.add(request_id)
            self._queue.put_nowait(request_id)

    async def run(self) -> None:
        requests, revision = await self._etcd.get_prefix_at(self._keys.savepoint_requests)
        for key, _ in requests:
            self._offer(key)
        watcher = asyncio.create_task(self._watch(revision + 1))
        try:
            while True:
                await self._serve(await self._queue.get())
        finally:
            watcher.cancel()

    async def _watch(self, start_revision: int) -> None:
        async for event in self._etcd.watch_prefix(self._keys.savepoint_requests, start_revision):
            if not event.deleted:
                self._offer(event.key)

    async def _result(self, request_id: str, result: SavepointResult) -> None:
        await self._etcd.put(self._keys.savepoint_result(request_id), encode(result))

    async def _serve(self, request_id: str) -> None:
        existing = await self._etcd.get(self._keys.savepoint_result(request_id))
        if existing is not None and decode(SavepointResult, existing).status != "pending":
            return  # served before, by this coordinator or an earlier one
        data = await self._etcd.get(self._keys.savepoint_request(request_id))
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
        target = f"{directory.rstrip('/')}/savepoint-{request_id}"
        await self._result(request_id, SavepointResult("pending", path=target))
        try:
            summary = await self._trigger("savepoint", target, request.stop)
        except CheckpointAbortedError as error:
            await self._result(request_id, SavepointResult("failed", error=str(error)))
            return
        await self._result(
            request_id,
            SavepointResult("completed", path=target, checkpoint_id=summary.checkpoint_id),
        )
        log.info("savepoint %s complete at %s", request_id, target)
        if request.stop:
            self._on_stop(target)
