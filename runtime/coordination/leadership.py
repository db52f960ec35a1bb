"""One coordinator per job: a record bound to the coordinator's etcd lease.

Every write that matters (trigger, completion) is a transaction guarded by
"the coordinator key still holds my record". When the lease expires (a driver
cut off from etcd), etcd deletes the key, so a zombie can complete nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import replace

from lockgate.runtime.coordination.cancellation import bounded, within
from lockgate.runtime.coordination.errors import CoordinatorConflictError
from lockgate.runtime.coordination.etcd import EtcdUnavailableError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import Compare, KeyAbsent, KeyValueStore, Put, ValueIs
from lockgate.runtime.coordination.records import CoordinatorRecord, decode, encode

log = logging.getLogger(__name__)
# How long a coordinator that stops refreshing its lease (killed, cut off) keeps
# the job: its successor can take over this long after the last refresh.
LEASE_TTL_S = 10


class Leadership:
    def __init__(self, store: KeyValueStore, keys: JobKeys, ttl_s: int = LEASE_TTL_S) -> None:
        if ttl_s < 2:
            raise ValueError(f"the coordinator lease TTL must be at least 2 s, got {ttl_s}")
        self._store = store
        self._keys = keys
        self.ttl_s = ttl_s
        self.record = CoordinatorRecord(
            coordinator_id=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=time.time_ns() // 1_000_000,
        )
        self._encoded = encode(self.record)
        self.lease_id: int | None = None
        self.lost = asyncio.Event()
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def guard(self) -> Compare:
        """Transaction condition: this coordinator still leads."""
        return ValueIs(self._keys.coordinator, self._encoded)

    @property
    def launch(self) -> int:
        return self.record.launch

    async def acquire(self, wait_s: float = 0.0) -> None:
        """Become the job's coordinator, waiting up to `wait_s` for a current one to go.
        Taking the job allocates the next launch number in the same transaction."""
        deadline = time.monotonic() + wait_s
        while True:
            current = await self._store.get(self._keys.launch)
            record = replace(self.record, launch=(0 if current is None else int(current)) + 1)
            encoded = encode(record)
            unchanged = (
                KeyAbsent(self._keys.launch) if current is None else ValueIs(self._keys.launch, current)
            )
            lease = await self._store.grant_lease(self.ttl_s)
            if await self._store.transaction(
                [KeyAbsent(self._keys.coordinator), unchanged],
                [
                    Put(self._keys.coordinator, encoded, lease),
                    Put(self._keys.launch, str(record.launch).encode()),
                ],
            ):
                self.record, self._encoded, self.lease_id = record, encoded, lease
                self._keepalive = asyncio.create_task(self._keep_alive(), name="lease-keepalive")
                return
            await self._store.revoke_lease(lease)
            if await self._store.get(self._keys.coordinator) is None:
                continue  # another driver took a launch number between our read and write
            remaining = deadline - time.monotonic()
            holder = await self._holder()
            job = f"job {self._keys.namespace}/{self._keys.job}"
            if remaining <= 0:
                raise CoordinatorConflictError(
                    f"{job} is already coordinated by {holder}; stop that driver first, or start "
                    f"this one with a wait (--takeover-wait) so it takes over once the other's "
                    f"lease expires, within {self.ttl_s} s of its last refresh"
                )
            log.warning("%s is coordinated by %s; waiting up to %.0f s for it to go", job, holder, remaining)
            await self._wait_for_release(remaining)

    async def _holder(self) -> str:
        data = await self._store.get(self._keys.coordinator)
        if data is None:
            return "an unknown process"
        holder = decode(CoordinatorRecord, data)
        return f"coordinator {holder.coordinator_id} (pid {holder.pid} on {holder.host})"

    async def _wait_for_release(self, timeout: float) -> None:
        _, revision = await self._store.get_prefix_at(self._keys.coordinator)
        if await self._store.get(self._keys.coordinator) is None:
            return

        async def deleted() -> None:
            async for event in self._store.watch_prefix(self._keys.coordinator, revision + 1):
                if event.deleted and event.key == self._keys.coordinator:
                    return

        with contextlib.suppress(TimeoutError):
            await within(deleted(), timeout)

    async def _keep_alive(self) -> None:
        """Refresh the lease; declare it lost by this process's own clock once a TTL has
        passed since the last refresh etcd confirmed was sent, even while a call hangs
        (etcd unreachable, a partition that drops packets): etcd may have expired it."""
        assert self.lease_id is not None
        confirmed_sent = time.monotonic()
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            sent = time.monotonic()
            remaining = confirmed_sent + self.ttl_s - sent
            try:
                ttl = await within(self._store.refresh_lease(self.lease_id), max(remaining, 0.001))
            except (EtcdUnavailableError, TimeoutError):
                if time.monotonic() - confirmed_sent < self.ttl_s:
                    continue
                log.error("coordinator lease lapsed while etcd was unreachable: this coordinator is fenced")
                break
            if ttl <= 0:
                log.error("coordinator lease %s expired: this coordinator is fenced", self.lease_id)
                break
            confirmed_sent = sent
        self.lost.set()

    def abandon(self) -> None:
        """Stop keeping the lease alive, as a crashed or partitioned driver would."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    async def release(self) -> None:
        self.abandon()
        if self.lease_id is not None:
            try:
                await bounded(self._store.revoke_lease(self.lease_id), "revoking the coordinator lease")
            except EtcdUnavailableError:
                log.warning("could not revoke the coordinator lease; it will expire")
            self.lease_id = None
