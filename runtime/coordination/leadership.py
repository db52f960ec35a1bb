"""One coordinator per job: a record in the job's keys and a heartbeat beside it.

Every write that matters (trigger, completion) is a transaction guarded by
"the coordinator key still holds my record", so a coordinator that was replaced
can complete nothing.

Who may replace whom rests on keys only the job's etcd user can write, never on
the lease: etcd lets any authenticated user keep any lease alive (LeaseKeepAlive
is not permission-checked), so a lease another tenant keeps alive would keep a
dead coordinator's record forever. The holder moves `coordinator-heartbeat` up
every TTL / 3, each beat guarded by its record; a successor that sees the
heartbeat stand still for a TTL by its own clock (no two hosts' clocks are
compared) replaces the record in a transaction guarded on exactly the record and
heartbeat it saw, so a holder that beat in between keeps the job. The record
also sits on a lease: when nobody interferes, a dead holder's keys go with it
and a successor starts without waiting out the TTL. A record with no heartbeat
beside it (written by a Lockgate from before heartbeats) is waited out on its
lease alone: it cannot show that its holder is alive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, replace

from lockgate.runtime.clock import SystemClock, WaitableClock
from lockgate.runtime.coordination.cancellation import bounded, within
from lockgate.runtime.coordination.errors import CoordinatorConflictError
from lockgate.runtime.coordination.etcd import EtcdUnavailableError
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import (
    Compare,
    Delete,
    KeyAbsent,
    KeyValueStore,
    LeaseNotFoundError,
    Put,
    ValueIs,
)
from lockgate.runtime.coordination.records import CoordinatorRecord, decode, encode

log = logging.getLogger(__name__)
# How long a coordinator that stops beating (killed, paused, cut off) keeps the
# job: its successor takes over once the heartbeat stood still this long.
LEASE_TTL_S = 10


@dataclass(frozen=True)
class _Holder:
    """What a successor saw of the current coordinator: its record and last beat."""

    record: bytes
    beat: bytes | None

    @staticmethod
    def of(rows: list[tuple[bytes, bytes]], keys: JobKeys) -> _Holder | None:
        found = dict(rows)
        record = found.get(keys.coordinator)
        return None if record is None else _Holder(record, found.get(keys.coordinator_heartbeat))

    def unchanged(self, keys: JobKeys) -> list[Compare]:
        """Transaction guard: the holder has neither beaten nor been replaced since."""
        beat = keys.coordinator_heartbeat
        return [
            ValueIs(keys.coordinator, self.record),
            KeyAbsent(beat) if self.beat is None else ValueIs(beat, self.beat),
        ]

    def describe(self) -> str:
        holder = decode(CoordinatorRecord, self.record)
        return f"coordinator {holder.coordinator_id} (pid {holder.pid} on {holder.host})"


class Leadership:
    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        ttl_s: int = LEASE_TTL_S,
        *,
        clock: WaitableClock | None = None,
    ) -> None:
        if ttl_s < 2:
            raise ValueError(f"the coordinator lease TTL must be at least 2 s, got {ttl_s}")
        self._store = store
        self._keys = keys
        self.ttl_s = ttl_s
        # Beats are sent, and a holder's silence measured, on this clock.
        self._clock: WaitableClock = clock or SystemClock()
        self.record = CoordinatorRecord(
            coordinator_id=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=time.time_ns() // 1_000_000,
        )
        self._encoded = encode(self.record)
        self.lease_id: int | None = None
        self._beats = 0
        self.lost = asyncio.Event()
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def guard(self) -> Compare:
        """Transaction condition: this coordinator still leads."""
        return ValueIs(self._keys.coordinator, self._encoded)

    @property
    def launch(self) -> int:
        return self.record.launch

    def _now_s(self) -> float:
        return self._clock.monotonic_ms() / 1000

    async def acquire(self, wait_s: float = 0.0) -> None:
        """Become the job's coordinator, waiting up to `wait_s` for a current one to go
        (its record deleted, or its heartbeat still for a TTL). Taking the job
        allocates the next launch number in the same transaction."""
        deadline = self._now_s() + wait_s
        silent: _Holder | None = None
        while True:
            if await self._take(silent):
                self._keepalive = asyncio.create_task(self._keep_alive(), name="coordinator-heartbeat")
                return
            rows, revision = await self._store.get_prefix_at(self._keys.coordinator)
            holder = _Holder.of(rows, self._keys)
            if holder is None:
                silent = None
                continue  # gone since, or another driver took a launch number between our read and write
            remaining = deadline - self._now_s()
            job = f"job {self._keys.namespace}/{self._keys.job}"
            if remaining <= 0:
                raise CoordinatorConflictError(
                    f"{job} is already coordinated by {holder.describe()}; stop that driver first, or "
                    f"start this one with a wait (--takeover-wait) so it takes over once the other "
                    f"stops, within {self.ttl_s} s of its last heartbeat"
                )
            if silent is None:
                log.warning(
                    "%s is coordinated by %s; waiting up to %.0f s for it to go",
                    job,
                    holder.describe(),
                    remaining,
                )
            silent = await self._wait_for_silence(holder, revision, deadline)

    async def _take(self, silent: _Holder | None) -> bool:
        """Write this coordinator's record with the next launch number, if the key is
        free (`silent` None) or still holds exactly `silent`."""
        current = await self._store.get(self._keys.launch)
        record = replace(self.record, launch=(0 if current is None else int(current)) + 1)
        encoded = encode(record)
        unchanged = KeyAbsent(self._keys.launch) if current is None else ValueIs(self._keys.launch, current)
        holder = [KeyAbsent(self._keys.coordinator)] if silent is None else silent.unchanged(self._keys)
        lease = await self._store.grant_lease(self.ttl_s)
        try:
            taken = await self._store.transaction(
                [*holder, unchanged],
                [
                    Put(self._keys.coordinator, encoded, lease),
                    Put(self._keys.coordinator_heartbeat, b"0", lease),
                    Put(self._keys.launch, str(record.launch).encode()),
                ],
            )
        except LeaseNotFoundError:
            # Any etcd user may revoke a lease that holds no key yet: try again with another.
            log.warning("the new coordinator lease was revoked before it was used; taking another")
            taken = False
        if not taken:
            await self._store.revoke_lease(lease)
            return False
        if silent is not None:
            log.warning(
                "took over from %s, whose heartbeat stood still for %s s", silent.describe(), self.ttl_s
            )
        self.record, self._encoded, self.lease_id, self._beats = record, encoded, lease, 0
        return True

    async def _wait_for_silence(self, holder: _Holder, revision: int, deadline: float) -> _Holder | None:
        """`holder` (as read at `revision`) once its heartbeat has stood still for a TTL
        on this process's clock, with the beat it stands at; None as soon as its record
        changes or goes, or at `deadline` (never earlier for a record without a heartbeat)."""
        changes: list[tuple[bytes, bytes | None]] = []
        changed = asyncio.Event()

        async def watch() -> None:
            async for event in self._store.watch_prefix(self._keys.coordinator, revision + 1):
                changes.append((event.key, None if event.deleted else event.value))
                changed.set()

        watcher = asyncio.create_task(watch(), name="coordinator-watch")
        beat, since = holder.beat, self._now_s()
        try:
            while True:
                for key, value in changes:
                    if key == self._keys.coordinator:
                        return None
                    if key == self._keys.coordinator_heartbeat and value != beat:
                        beat, since = value, self._now_s()
                changes.clear()
                changed.clear()
                now = self._now_s()
                if beat is not None and now - since >= self.ttl_s:
                    return replace(holder, beat=beat)
                if now >= deadline:
                    return None
                wake = deadline if beat is None else min(since + self.ttl_s, deadline)
                await self._until(changed, wake - now, watcher)
        finally:
            watcher.cancel()

    async def _until(self, changed: asyncio.Event, seconds: float, watcher: asyncio.Task[None]) -> None:
        """Until `changed` is set or `seconds` pass on this process's clock."""
        waiters = {asyncio.ensure_future(self._clock.sleep(seconds)), asyncio.ensure_future(changed.wait())}
        done, _ = await asyncio.wait({*waiters, watcher}, return_when="FIRST_COMPLETED")
        for waiter in waiters:
            waiter.cancel()
        if watcher in done:
            watcher.result()  # the watch failed: say why
            raise RuntimeError("the watch of the coordinator record ended")

    async def _beat(self) -> bool:
        """Refresh the lease and move the heartbeat up; False once this coordinator no
        longer holds the record (replaced, or its lease ended and took it)."""
        assert self.lease_id is not None
        await self._store.refresh_lease(self.lease_id)
        self._beats += 1
        try:
            return await self._store.transaction(
                [self.guard],
                [Put(self._keys.coordinator_heartbeat, str(self._beats).encode(), self.lease_id)],
            )
        except LeaseNotFoundError:
            return False

    async def _keep_alive(self) -> None:
        """Beat every TTL / 3; declare the job lost once a beat finds the record
        replaced, or by this process's own clock once a TTL has passed since the last
        beat etcd confirmed was sent, even while a call hangs (etcd unreachable, a
        partition that drops packets): a successor may have taken over."""
        confirmed_sent = self._now_s()
        while True:
            await self._clock.sleep(self.ttl_s / 3)
            sent = self._now_s()
            remaining = confirmed_sent + self.ttl_s - sent
            try:
                held = await within(self._beat(), max(remaining, 0.001))
            except (EtcdUnavailableError, TimeoutError):
                if self._now_s() - confirmed_sent < self.ttl_s:
                    continue
                log.error("no heartbeat reached etcd for %s s: this coordinator is fenced", self.ttl_s)
                break
            if not held:
                log.error("the coordinator record is no longer this coordinator's: it is fenced")
                break
            confirmed_sent = sent
        self.lost.set()

    def abandon(self) -> None:
        """Stop beating, as a crashed, paused or partitioned driver would."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    async def release(self) -> None:
        """Give the job up: delete the record while it is still this coordinator's (not
        left to the lease, which another etcd user may be keeping alive), then end the lease."""
        self.abandon()
        if self.lease_id is None:
            return
        keys = self._keys
        try:
            await bounded(
                self._store.transaction(
                    [self.guard], [Delete(keys.coordinator), Delete(keys.coordinator_heartbeat)]
                ),
                "deleting the coordinator record",
            )
            await bounded(self._store.revoke_lease(self.lease_id), "revoking the coordinator lease")
        except EtcdUnavailableError:
            log.warning(
                "could not give up the coordinator record; a successor takes over within %s s", self.ttl_s
            )
        self.lease_id = None
