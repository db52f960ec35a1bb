"""Rescale requests from etcd: the running driver changes the job's parallelism in
place, stopping its tasks at a checkpoint and starting them again at the new
parallelism, without a new driver.

The operator or `lockgate rescale` writes `rescales/requests/<id>` (bound to a
lease that lapses when the requester stops waiting, as savepoint requests are).
The coordinator serves one at a time: it asks the job master whether the target
fits (`prepare`: bounds, and on Spark the executors the target needs, reserved
while the old tasks keep running — make before break), answers `refused` with
the reason if not, else takes a checkpoint that stops the tasks (no savepoint, no
draining: event time stands where it was) and hands the order to the job master,
which relaunches at the target from that checkpoint. The relaunch's coordinator
answers `rescaled` (`RescaleQueue.answer`). A stop checkpoint that aborts fails
the launch: the sources have stopped reading, so the job master relaunches at the
old parallelism from the latest checkpoint, and the request is answered `failed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lockgate.runtime.clock import Clock
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.errors import CheckpointAbortedError, CoordinatorFencedError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore, Put
from lockgate.runtime.coordination.records import (
    CompletedCheckpoint,
    RescaleRequest,
    RescaleResult,
    decode,
    encode,
)
from lockgate.runtime.coordination.savepoint_queue import GuardedWrite, TriggerFn

log = logging.getLogger(__name__)

RESERVE_TIMEOUT_S = 120.0
"""How long a scale-up waits for the executors it needs before it is refused."""


class RescaleRefusedError(ValueError):
    """The target does not fit the job or the resources it can get; the job runs on
    as it is."""


class RescaleAbortedError(RuntimeError):
    """The checkpoint that was to stop the tasks for a rescale did not complete."""


@dataclass(frozen=True)
class RescaleOrder:
    """A rescale the coordinator stopped the tasks for: the job master relaunches at
    `parallelism` from `checkpoint`."""

    request_id: str
    parallelism: int
    checkpoint: CompletedCheckpoint
    stopped_ms: int


PrepareFn = Callable[[int], Awaitable[None]]
"""Checks a target parallelism and reserves what it needs; raises RescaleRefusedError."""


@dataclass(frozen=True)
class InPlaceRescale:
    """What a coordinator needs to serve rescale requests: the launch's parallelism,
    the job master's check of a target, and the rescale this launch enacts, if any
    (answered once the launch leads the job)."""

    parallelism: int
    prepare: PrepareFn
    enacting: RescaleOrder | None = None


class RescaleQueue:
    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        trigger: TriggerFn,
        on_stop: Callable[[RescaleOrder], None],
        *,
        prepare: PrepareFn,
        parallelism: int,
        guarded: GuardedWrite,
        clock: Clock,
    ) -> None:
        self._store = store
        self._keys = keys
        self._trigger = trigger
        self._on_stop = on_stop
        self._prepare = prepare
        self._parallelism = parallelism
        self._guarded = guarded
        self._clock = clock
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._seen: set[str] = set()

    def _offer(self, key: bytes) -> None:
        request_id = key[len(self._keys.rescale_requests) :].decode()
        if request_id not in self._seen:
            self._seen.add(request_id)
            self._queue.put_nowait(request_id)

    async def answer(self, order: RescaleOrder) -> None:
        """Tell the requester of `order` that this launch runs at its target."""
        self._seen.add(order.request_id)
        await self._result(
            order.request_id,
            RescaleResult(
                "rescaled",
                order.parallelism,
                checkpoint_id=order.checkpoint.checkpoint_id,
                stopped_ms=order.stopped_ms,
                relaunched_ms=self._clock.now_ms(),
            ),
        )
        log.info(
            "rescaled to parallelism %s from checkpoint %s (request %s)",
            order.parallelism,
            order.checkpoint.checkpoint_id,
            order.request_id,
        )

    async def run(self) -> None:
        requests, revision = await self._store.get_prefix_at(self._keys.rescale_requests)
        for key, _ in requests:
            self._offer(key)
        watcher = asyncio.create_task(self._watch(revision + 1), name="rescale-requests")
        try:
            while True:
                await self._serve(await self._queue.get())
        finally:
            await cancel_and_wait([watcher], "closing the rescale queue")

    async def _watch(self, start_revision: int) -> None:
        async for event in self._store.watch_prefix(self._keys.rescale_requests, start_revision):
            if not event.deleted:
                self._offer(event.key)

    async def _result(self, request_id: str, result: RescaleResult) -> None:
        if not await self._guarded([Put(self._keys.rescale_result(request_id), encode(result))]):
            raise CoordinatorFencedError(f"the coordinator was replaced while serving rescale {request_id}")

    async def _serve(self, request_id: str) -> None:
        existing = await self._store.get(self._keys.rescale_result(request_id))
        if existing is not None and decode(RescaleResult, existing).status != "pending":
            return  # served before, by this coordinator or an earlier one
        data = await self._store.get(self._keys.rescale_request(request_id))
        if data is None:
            return  # withdrawn, or expired: its requester stopped waiting
        current = self._parallelism
        # Taken up: the requester knows a driver works on it (reserving executors may take long).
        await self._result(request_id, RescaleResult("pending", current))
        try:
            target = _target(data)
            if target != current:
                await self._prepare(target)
        except RescaleRefusedError as refusal:
            log.warning("rescale %s refused: %s", request_id, refusal)
            await self._result(request_id, RescaleResult("refused", current, reason=str(refusal)))
            return
        if target == current:
            await self._result(request_id, RescaleResult("rescaled", current, reason="already at it"))
            return
        stopped_ms = self._clock.now_ms()
        await self._result(request_id, RescaleResult("pending", current, stopped_ms=stopped_ms))
        log.info("rescale %s: stopping at a checkpoint to go from %s to %s", request_id, current, target)
        try:
            checkpoint = await self._trigger("checkpoint", None, True)
        except CheckpointAbortedError as error:
            reason = f"its checkpoint did not complete ({error}); relaunched at {current} from the latest"
            await self._result(request_id, RescaleResult("failed", current, reason=reason))
            raise RescaleAbortedError(f"rescale {request_id} to {target}: {reason}") from error
        self._on_stop(RescaleOrder(request_id, target, checkpoint, stopped_ms))


def _target(data: bytes) -> int:
    """The request's target parallelism: a whole number of at least 1 (the request
    comes from whoever may write the job's keys)."""
    try:
        request = decode(RescaleRequest, data)
    except (ValueError, TypeError) as error:
        raise RescaleRefusedError(f"the request is not a rescale request: {error}") from None
    target = request.parallelism
    if isinstance(target, bool) or not isinstance(target, int) or target < 1:
        raise RescaleRefusedError(f"parallelism {target!r} is not a whole number of at least 1")
    return target
