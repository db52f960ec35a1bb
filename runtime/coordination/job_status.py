"""The driver's side of the `status` key: a heartbeat while the job runs, the
outcome when it ends.

The heartbeat is bound to a lease, so a driver that dies without a word leaves
no `running` status behind once its lease expires — an operator tells a live
job from a lost one without asking Kubernetes. Any etcd user can keep a lease
alive, though, so an observer that reads again and again (`StatusReader`) also
takes a `running` status whose beat has stood still for the TTL as lost. The
outcome is written without a lease: it must outlive the driver, for whoever
restarts or upgrades the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from lockgate.runtime.clock import Clock, SystemClock
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.etcd import EtcdUnavailableError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore, LeaseNotFoundError
from lockgate.runtime.coordination.records import JobState, JobStatus, decode, encode
from lockgate.runtime.failure_class import FailureClass, classify, failure_traceback

log = logging.getLogger(__name__)
now_ms = SystemClock().now_ms
# A driver beats every third of this; a `running` status older goes with its lease.
STATUS_TTL_S = 10


class StatusHeartbeat:
    """Publishes `running` every `ttl_s / 3` seconds under a lease of `ttl_s`."""

    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        parallelism: int,
        restarts: Callable[[], int],
        *,
        driver: str | None = None,
        ttl_s: int = STATUS_TTL_S,
    ) -> None:
        self._store = store
        self._keys = keys
        self._status = JobStatus("running", now_ms(), parallelism, driver=driver)
        self._restarts = restarts
        self._ttl_s = ttl_s
        self._lease: int | None = None
        self._beating: asyncio.Task[None] | None = None

    async def start(self, parallelism: int | None = None) -> None:
        """Begin beating. A job master's relaunches call it again, with the parallelism
        they run at: a changed one is beaten at once (a rescale in place)."""
        if parallelism is not None and parallelism != self._status.parallelism:
            self._status = dataclasses.replace(self._status, parallelism=parallelism)
            if self._beating is not None:
                await self._beat()
        if self._beating is not None:
            return
        await self._beat()
        self._beating = asyncio.create_task(self._keep_beating(), name="status-heartbeat")

    async def _beat(self) -> None:
        if self._lease is None or await self._store.refresh_lease(self._lease) <= 0:
            self._lease = await self._store.grant_lease(self._ttl_s)
        status = dataclasses.replace(self._status, at_ms=now_ms(), restarts=self._restarts())
        try:
            await self._store.put(self._keys.status, encode(status), lease=self._lease)
        except LeaseNotFoundError:
            # The lease lapsed after its refresh (this process paused in between, or the
            # put waited out a reconnect): beat under a new one.
            self._lease = await self._store.grant_lease(self._ttl_s)
            await self._store.put(self._keys.status, encode(status), lease=self._lease)

    async def _keep_beating(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)  # the heartbeat period
            try:
                await self._beat()
            except EtcdUnavailableError as error:
                # The job goes on without etcd for a while; the status shows it lost once the lease lapses.
                log.warning("job status heartbeat missed: %s", error)
            except Exception:
                # A heartbeat that ended here would leave a running job shown as lost for good.
                log.exception("job status heartbeat failed; the next beat starts with a new lease")
                self._lease = None

    def abandon(self) -> None:
        """Stop beating without a word, as a driver that was killed would."""
        if self._beating is not None:
            self._beating.cancel()

    async def finish(
        self, state: JobState, *, savepoint: str | None = None, failure: BaseException | None = None
    ) -> None:
        """Stop the heartbeat and record the outcome, without a lease; a failed job's
        with the failure's message, class and the job's traceback."""
        if self._beating is not None:
            # Awaiting it under suppress(CancelledError) would also swallow a cancellation of this call.
            await cancel_and_wait([self._beating], "stopping the status heartbeat")
        outcome = dataclasses.replace(
            self._status,
            state=state,
            at_ms=now_ms(),
            restarts=self._restarts(),
            savepoint=savepoint,
            **failure_fields(failure),
        )
        await self._store.put(self._keys.status, encode(outcome))
        if self._lease is not None:
            with contextlib.suppress(EtcdUnavailableError):
                await self._store.revoke_lease(self._lease)


def failure_fields(failure: BaseException | None) -> dict[str, Any]:
    """What a failed job's status says of `failure` (nothing for no failure)."""
    if failure is None:
        return {}
    return {
        "message": str(failure),
        "failure_class": classify(failure),
        "traceback": failure_traceback(failure),
    }


async def record_refusal(
    store: KeyValueStore, keys: JobKeys, parallelism: int, refusal: BaseException, driver: str | None
) -> None:
    """A driver that refused the job before starting it (a job that does not build, a
    savepoint that does not fit): `failed`, with why, kept (no lease). A refusal is
    permanent: one that declares no class is about the job's options or manifest."""
    fields = failure_fields(refusal)
    if not fields["failure_class"].permanent:
        fields["failure_class"] = FailureClass.DEFINITION
    status = JobStatus("failed", now_ms(), parallelism, driver=driver, **fields)
    await store.put(keys.status, encode(status))


async def read_status(store: KeyValueStore, keys: JobKeys) -> JobStatus | None:
    """The job's status; None when no driver ever reported, or a running one was lost."""
    data = await store.get(keys.status)
    return None if data is None else decode(JobStatus, data)


class StatusReader:
    """Reads jobs' status for an observer that reads again and again (the operator).
    A `running` status whose beat (`at_ms`, here only a value that changes each
    beat: no two hosts' clocks are compared) has not moved for `ttl_s` on this
    reader's clock reads as None, as it would once its lease lapsed: another etcd
    user may be keeping that lease alive."""

    def __init__(self, store: KeyValueStore, ttl_s: int = STATUS_TTL_S, clock: Clock | None = None) -> None:
        self._store = store
        self._ttl_ms = ttl_s * 1000
        self._clock: Clock = clock or SystemClock()
        self._beats: dict[bytes, tuple[int, int]] = {}  # status key -> (beat, when it was first read)

    async def read(self, keys: JobKeys) -> JobStatus | None:
        status = await read_status(self._store, keys)
        if status is None or status.state != "running":
            self._beats.pop(keys.status, None)
            return status
        now = self._clock.monotonic_ms()
        beat, since = self._beats.get(keys.status, (None, now))
        if beat != status.at_ms:
            self._beats[keys.status] = (status.at_ms, now)
            return status
        return None if now - since >= self._ttl_ms else status
