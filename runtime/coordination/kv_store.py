"""The control plane's contract: a key-value store with revisions, transactions,
leases and watches — what etcd offers and all that Lockgate asks of it.

Two implementations, which inherit what is written once here: `Etcd` (the real one,
shared by every process of a job) and `InMemoryStore` (one process: tests and the
in-process runner). Everything above (coordinator, participants, leadership,
savepoint queue, status) is written against this Protocol, and one contract suite
runs against both.

Transactions are given as plain records (`ValueIs`, `Put`, ...) that each
implementation translates, so no caller touches a client library's types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self


class LeaseNotFoundError(Exception):
    """A write bound to a lease that the store no longer has (expired or revoked)."""


@dataclass(frozen=True)
class ValueIs:
    """Transaction guard: `key` exists and holds exactly `value`."""

    key: bytes
    value: bytes


@dataclass(frozen=True)
class KeyAbsent:
    """Transaction guard: `key` does not exist."""

    key: bytes


@dataclass(frozen=True)
class Put:
    key: bytes
    value: bytes = field(repr=False)
    lease: int | None = None  # the key is deleted when this lease ends


@dataclass(frozen=True)
class Delete:
    key: bytes


@dataclass(frozen=True)
class DeletePrefix:
    prefix: bytes


Compare = ValueIs | KeyAbsent
Operation = Put | Delete | DeletePrefix


@dataclass(frozen=True)
class WatchEvent:
    key: bytes
    value: bytes
    deleted: bool
    revision: int


class KeyValueStore(Protocol):
    """Keys and values are bytes; every change gets the next store revision (all the
    writes of one transaction share one), and a watch from revision r sees every
    change at r or later, in order, exactly once."""

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get(self, key: bytes) -> bytes | None: ...

    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return (await self.get_prefix_at(prefix))[0]

    async def get_prefix_at(self, prefix: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
        """The keys under `prefix` (sorted) and the revision they were read at: a watch
        from that revision + 1 misses no change after the read."""
        ...

    async def put(self, key: bytes, value: bytes, lease: int | None = None) -> None:
        """Raises `LeaseNotFoundError` if `lease` has ended."""
        await self.transaction([], [Put(key, value, lease)])

    async def delete(self, key: bytes) -> None:
        await self.transaction([], [Delete(key)])

    async def delete_prefix(self, prefix: bytes) -> None:
        await self.transaction([], [DeletePrefix(prefix)])

    async def transaction(
        self, compare: Sequence[Compare], success: Sequence[Operation], failure: Sequence[Operation] = ()
    ) -> bool:
        """Atomically: if every guard in `compare` holds, apply `success` and return
        True; else apply `failure` and return False."""
        ...

    async def grant_lease(self, ttl_s: int) -> int: ...

    async def refresh_lease(self, lease_id: int) -> int:
        """Keep the lease alive; returns its new TTL (0 or less: it has ended)."""
        ...

    async def revoke_lease(self, lease_id: int) -> None:
        """End the lease and delete its keys; one already ended is no error."""
        ...

    def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Every change under `prefix` from `start_revision` on, until cancelled."""
        ...
