"""The control plane in one process's memory: a `KeyValueStore` for tests and the
in-process runner, with etcd's semantics (revisions, atomic guarded transactions,
leases whose keys go when they end, watches that replay from a revision).

Tasks run on their own threads and event loops, so the store is guarded by a
lock and wakes each watcher on the watcher's own loop. Leases end by the store's
clock: a `ManualClock` lets a test end one by moving time, without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field

from lockgate.runtime.clock import Clock, SystemClock
from lockgate.runtime.coordination.kv_store import (
    Compare,
    Delete,
    KeyValueStore,
    LeaseNotFoundError,
    Operation,
    Put,
    ValueIs,
    WatchEvent,
)

# Changes kept for watches that start in the past; one that starts before them
# is refused, as etcd refuses a watch from a compacted revision.
HISTORY = 100_000
# How often ended leases are looked for when nobody calls the store.
_REAP_EVERY_S = 0.05


class CompactedError(RuntimeError):
    """A watch asked for changes older than the store still keeps."""


@dataclass
class _Lease:
    ttl_s: int
    expires_ms: int
    keys: set[bytes] = field(default_factory=set)


@dataclass
class _Watcher:
    prefix: bytes
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[WatchEvent]


class InMemoryStore(KeyValueStore):
    def __init__(self, clock: Clock | None = None, history: int = HISTORY) -> None:
        self.clock: Clock = clock or SystemClock()
        self._history_size = history
        self._lock = threading.Lock()
        self._data: dict[bytes, tuple[bytes, int | None]] = {}  # key -> (value, lease)
        self._revision = 1
        self._history: list[WatchEvent] = []
        self._compacted = 0  # the newest revision whose changes are no longer kept
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(0x1000)
        self._watchers: list[_Watcher] = []
        self._reaper: threading.Thread | None = None

    @property
    def revision(self) -> int:
        return self._revision

    # -- life cycle: the store outlives every client's connect and close ---------------

    async def connect(self) -> None:
        pass

    async def close(self) -> None:
        pass

    # -- key-value -----------------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        with self._locked():
            held = self._data.get(key)
            return None if held is None else held[0]

    async def get_prefix_at(self, prefix: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
        with self._locked():
            rows = sorted((k, v) for k, (v, _) in self._data.items() if k.startswith(prefix))
            return rows, self._revision

    async def transaction(
        self, compare: Sequence[Compare], success: Sequence[Operation], failure: Sequence[Operation] = ()
    ) -> bool:
        with self._locked():
            holds = all(self._holds(guard) for guard in compare)
            operations = success if holds else failure
            for operation in operations:
                lease = operation.lease if isinstance(operation, Put) else None
                if lease is not None and lease not in self._leases:
                    raise LeaseNotFoundError(f"lease {lease:x} has expired or was revoked")
            self._apply(operations)
            return holds

    def _holds(self, guard: Compare) -> bool:
        held = self._data.get(guard.key)
        if isinstance(guard, ValueIs):
            return held is not None and held[0] == guard.value
        return held is None

    def _apply(self, operations: Sequence[Operation]) -> None:
        """Under the lock: one revision for all of `operations`."""
        revision = self._revision + 1
        events: list[WatchEvent] = []
        for operation in operations:
            if isinstance(operation, Put):
                self._unbind(operation.key)
                self._data[operation.key] = (operation.value, operation.lease)
                if operation.lease is not None:
                    self._leases[operation.lease].keys.add(operation.key)
                events.append(WatchEvent(operation.key, operation.value, False, revision))
            else:
                if isinstance(operation, Delete):
                    doomed = [operation.key] if operation.key in self._data else []
                else:
                    doomed = sorted(k for k in self._data if k.startswith(operation.prefix))
                for key in doomed:
                    self._unbind(key)
                    del self._data[key]
                    events.append(WatchEvent(key, b"", True, revision))
        if events:  # as in etcd, a transaction that changes nothing takes no revision
            self._revision = revision
            self._publish(events)

    def _unbind(self, key: bytes) -> None:
        held = self._data.get(key)
        if held is not None and held[1] is not None and held[1] in self._leases:
            self._leases[held[1]].keys.discard(key)

    def _publish(self, events: list[WatchEvent]) -> None:
        self._history.extend(events)
        if len(self._history) > self._history_size:
            self._compacted = self._history[-self._history_size - 1].revision
            del self._history[: -self._history_size]
        alive = []
        for watcher in self._watchers:
            try:
                for event in events:
                    if event.key.startswith(watcher.prefix):
                        watcher.loop.call_soon_threadsafe(watcher.queue.put_nowait, event)
            except RuntimeError:  # its event loop is closed: the watch is over
                continue
            alive.append(watcher)
        self._watchers = alive

    # -- leases --------------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> int:
        with self._locked():
            lease = next(self._lease_ids)
            self._leases[lease] = _Lease(ttl_s, self.clock.monotonic_ms() + ttl_s * 1000)
            if self._reaper is None or not self._reaper.is_alive():
                self._reaper = threading.Thread(target=self._reap, daemon=True, name="lease-reaper")
                self._reaper.start()
            return lease

    async def refresh_lease(self, lease_id: int) -> int:
        with self._locked():
            lease = self._leases.get(lease_id)
            if lease is None:
                return -1
            lease.expires_ms = self.clock.monotonic_ms() + lease.ttl_s * 1000
            return lease.ttl_s

    async def revoke_lease(self, lease_id: int) -> None:
        with self._locked():
            self._end_lease(lease_id)

    def _end_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._apply([Delete(key) for key in sorted(lease.keys)])

    def end_all_leases(self) -> None:
        """Its users are gone (an in-process run ended): every lease ends now, and with
        the last the reaper thread, which would otherwise keep the store alive until
        the longest TTL ran out."""
        with self._locked():
            for lease_id in list(self._leases):
                self._end_lease(lease_id)
            reaper = self._reaper
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join()  # it sees no lease at its next look, within _REAP_EVERY_S

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's lock, taken after ending the leases that ran out: no caller
        ever sees a key whose lease has ended."""
        with self._lock:
            now = self.clock.monotonic_ms()
            for lease_id in [i for i, lease in self._leases.items() if lease.expires_ms <= now]:
                self._end_lease(lease_id)
            yield

    def _reap(self) -> None:
        while True:
            with self._locked():
                if not self._leases:
                    self._reaper = None
                    return
            time.sleep(_REAP_EVERY_S)

    # -- watches -------------------------------------------------------------------

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchEvent]:
        watcher = _Watcher(prefix, asyncio.get_running_loop(), asyncio.Queue())
        with self._locked():
            if start_revision <= self._compacted:
                raise CompactedError(
                    f"a watch from revision {start_revision}: the store keeps only the changes "
                    f"after revision {self._compacted}"
                )
            for event in self._history:
                if event.revision >= start_revision and event.key.startswith(prefix):
                    watcher.queue.put_nowait(event)
            self._watchers.append(watcher)
        try:
            while True:
                yield await watcher.queue.get()
        finally:
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)
