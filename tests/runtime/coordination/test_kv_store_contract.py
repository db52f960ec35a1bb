"""One contract, two control planes: everything the coordination layer relies on,
run against a real etcd and against the in-memory store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.in_memory_store import CompactedError, InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import (
    Delete,
    DeletePrefix,
    KeyAbsent,
    KeyValueStore,
    LeaseNotFoundError,
    Put,
    ValueIs,
    WatchEvent,
)


@pytest_asyncio.fixture(params=["etcd", "in-memory"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[KeyValueStore]:
    if request.param == "in-memory":
        yield InMemoryStore()
        return
    config: EtcdConfig = request.getfixturevalue("etcd_config")
    async with Etcd(config) as etcd:
        yield etcd


@pytest.fixture
def root(keys: JobKeys) -> bytes:
    return keys.root


async def _take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    return [await asyncio.wait_for(anext(events), 10) for _ in range(count)]


async def test_put_get_and_delete(store: KeyValueStore, root: bytes) -> None:
    assert await store.get(root + b"a") is None
    await store.put(root + b"a", b"1")
    await store.put(root + b"a", b"2")
    assert await store.get(root + b"a") == b"2"
    await store.delete(root + b"a")
    assert await store.get(root + b"a") is None


async def test_a_prefix_reads_its_keys_sorted_and_no_others(store: KeyValueStore, root: bytes) -> None:
    for key in (b"p/b", b"p/a", b"p/c", b"q/a", b"p"):
        await store.put(root + key, key)
    rows = await store.get_prefix(root + b"p/")
    assert rows == [(root + b"p/a", b"p/a"), (root + b"p/b", b"p/b"), (root + b"p/c", b"p/c")]
    await store.delete_prefix(root + b"p/")
    assert await store.get_prefix(root + b"p/") == []
    assert await store.get(root + b"p") == b"p", "a key that only starts like the prefix stays"


async def test_a_transaction_applies_success_only_when_every_guard_holds(
    store: KeyValueStore, root: bytes
) -> None:
    key, other = root + b"k", root + b"other"
    assert await store.transaction([KeyAbsent(key)], [Put(key, b"1")])
    assert not await store.transaction([KeyAbsent(key)], [Put(key, b"2")], [Put(other, b"lost")])
    assert await store.get(key) == b"1"
    assert await store.get(other) == b"lost", "the failure branch is applied when a guard fails"
    assert not await store.transaction([ValueIs(key, b"1"), ValueIs(other, b"x")], [Delete(key)])
    assert await store.get(key) == b"1", "one failing guard of two is enough to refuse"
    assert await store.transaction([ValueIs(key, b"1")], [Delete(key), DeletePrefix(other)])
    assert await store.get_prefix(root) == []
    assert not await store.transaction([ValueIs(key, b"1")], [Put(key, b"3")])


async def test_a_watch_from_the_revision_of_a_read_misses_nothing_after_it(
    store: KeyValueStore, root: bytes
) -> None:
    await store.put(root + b"before", b"0")
    rows, revision = await store.get_prefix_at(root)
    assert rows == [(root + b"before", b"0")]
    await store.put(root + b"after", b"1")
    await store.delete(root + b"before")
    events = store.watch_prefix(root, revision + 1)
    seen = await _take(events, 2)
    assert [(e.key, e.value, e.deleted) for e in seen] == [
        (root + b"after", b"1", False),
        (root + b"before", b"", True),
    ]
    assert seen[0].revision < seen[1].revision
    await store.put(root + b"live", b"2")
    (live,) = await _take(events, 1)
    assert (live.key, live.value) == (root + b"live", b"2"), "a watch goes on past what it replayed"
    await events.aclose()


async def test_the_writes_of_one_transaction_share_one_revision(store: KeyValueStore, root: bytes) -> None:
    _, revision = await store.get_prefix_at(root)
    await store.transaction([], [Put(root + b"a", b"1"), Put(root + b"b", b"2")])
    events = store.watch_prefix(root, revision + 1)
    first, second = await _take(events, 2)
    await events.aclose()
    assert first.revision == second.revision
    _, after = await store.get_prefix_at(root)
    assert after == first.revision


async def test_a_watch_sees_only_its_prefix(store: KeyValueStore, root: bytes) -> None:
    _, revision = await store.get_prefix_at(root)
    events = store.watch_prefix(root + b"mine/", revision + 1)
    await store.put(root + b"theirs/x", b"no")
    await store.put(root + b"mine/x", b"yes")
    (event,) = await _take(events, 1)
    await events.aclose()
    assert event.key == root + b"mine/x"


async def test_keys_bound_to_a_lease_go_with_it(store: KeyValueStore, root: bytes) -> None:
    lease = await store.grant_lease(30)
    await store.put(root + b"held", b"1", lease)
    await store.transaction([], [Put(root + b"also", b"2", lease)])
    assert await store.refresh_lease(lease) > 0
    _, revision = await store.get_prefix_at(root)
    await store.revoke_lease(lease)
    assert await store.get_prefix(root) == []
    events = store.watch_prefix(root, revision + 1)
    gone = await _take(events, 2)
    await events.aclose()
    assert sorted(e.key for e in gone if e.deleted) == [root + b"also", root + b"held"]
    assert await store.refresh_lease(lease) <= 0, "a revoked lease cannot be kept alive"
    await store.revoke_lease(lease)  # revoking it again is no error


async def test_a_write_bound_to_an_ended_lease_is_refused(store: KeyValueStore, root: bytes) -> None:
    lease = await store.grant_lease(30)
    await store.revoke_lease(lease)
    with pytest.raises(LeaseNotFoundError):
        await store.put(root + b"k", b"1", lease)
    with pytest.raises(LeaseNotFoundError):
        await store.transaction([], [Put(root + b"k", b"1", lease)])
    assert await store.get(root + b"k") is None


async def test_a_key_rebound_without_a_lease_outlives_the_lease(store: KeyValueStore, root: bytes) -> None:
    lease = await store.grant_lease(30)
    await store.put(root + b"k", b"leased", lease)
    await store.put(root + b"k", b"kept")
    await store.revoke_lease(lease)
    assert await store.get(root + b"k") == b"kept"


# -- the in-memory store's own promises -----------------------------------------------


async def test_a_lease_ends_when_the_stores_clock_passes_its_ttl(root: bytes) -> None:
    clock = ManualClock(0)
    store = InMemoryStore(clock)
    lease = await store.grant_lease(10)
    await store.put(root + b"k", b"1", lease)
    clock.advance(9_999)
    assert await store.get(root + b"k") == b"1"
    assert await store.refresh_lease(lease) == 10
    clock.advance(9_999)
    assert await store.get(root + b"k") == b"1", "a refresh restarts the TTL"
    clock.advance(1)
    assert await store.get(root + b"k") is None
    assert await store.refresh_lease(lease) <= 0


async def test_a_watch_on_another_threads_event_loop_gets_every_change(root: bytes) -> None:
    """Tasks watch from their own threads' loops; writes come from any loop."""
    store = InMemoryStore()
    seen: list[bytes] = []

    async def follow() -> None:
        async for event in store.watch_prefix(root, 1):
            seen.append(event.value)
            if len(seen) == 50:
                return

    thread = threading.Thread(target=asyncio.run, args=(follow(),))
    thread.start()
    for n in range(50):
        await store.put(root + b"k", str(n).encode())
    await asyncio.to_thread(thread.join, 10)
    assert seen == [str(n).encode() for n in range(50)]


async def test_a_watch_from_before_the_kept_history_is_refused(root: bytes) -> None:
    store = InMemoryStore(history=3)
    for n in range(5):
        await store.put(root + b"k", str(n).encode())
    events = store.watch_prefix(root, 1)
    with pytest.raises(CompactedError, match="revision 1"):
        await anext(events)
    replayed = store.watch_prefix(root, store.revision - 2)
    assert [e.value for e in await _take(replayed, 3)] == [b"2", b"3", b"4"]
    await replayed.aclose()
