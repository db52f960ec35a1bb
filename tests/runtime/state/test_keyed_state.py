"""Conformance: every keyed-state behaviour, run against the heap and RocksDB backends."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from lockgate.runtime import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
    key_group,
    key_group_range,
)
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.state.backend import (
    KeyedStateBackend,
    KeyGroupOwnershipError,
    StateMigrationError,
)
from lockgate.runtime.state.codecs import codec_for
from lockgate.runtime.state.keyed import NoCurrentKeyError, ValueState

from tests.conftest import Average


def test_value_state_default_update_clear(backend: KeyedStateBackend) -> None:
    count = backend.state(ValueStateDescriptor("count", default=0))
    backend.set_current_key("a")
    assert count.value() == 0
    count.update(5)
    backend.set_current_key("b")
    assert count.value() == 0
    count.update(7)
    backend.set_current_key("a")
    assert count.value() == 5
    count.clear()
    assert count.value() == 0
    backend.set_current_key("b")
    assert count.value() == 7


def test_value_state_update_none_clears(backend: KeyedStateBackend) -> None:
    name = backend.state(ValueStateDescriptor("name", default="anon"))
    backend.set_current_key(1)
    name.update("x")
    name.update(None)
    assert name.value() == "anon"


def test_values_of_any_picklable_type(backend: KeyedStateBackend) -> None:
    value = backend.state(ValueStateDescriptor("v"))
    samples = [{"a": [1, 2]}, (1, "x"), 3.5, b"\x00", {1, 2}, None]
    for i, sample in enumerate(samples):
        backend.set_current_key(("k", i))
        if sample is not None:
            value.update(sample)
        assert value.value() == sample


def test_list_state(backend: KeyedStateBackend) -> None:
    items = backend.state(ListStateDescriptor("items"))
    backend.set_current_key("k")
    assert items.get() == []
    items.add(1)
    items.add_all([2, 3])
    assert items.get() == [1, 2, 3]
    items.update([9])
    assert items.get() == [9]
    items.update([])
    assert items.get() == []
    items.add(4)
    items.clear()
    assert items.get() == []
    with pytest.raises(ValueError, match="items"):
        items.add(None)


def test_list_get_returns_a_copy(backend: KeyedStateBackend) -> None:
    items = backend.state(ListStateDescriptor("items"))
    backend.set_current_key("k")
    items.add(1)
    items.get().append(2)
    assert items.get() == [1]


def test_reducing_state(backend: KeyedStateBackend) -> None:
    total = backend.state(ReducingStateDescriptor("sum", lambda a, b: a + b))
    backend.set_current_key("k")
    assert total.get() is None
    for n in (1, 2, 3):
        total.add(n)
    assert total.get() == 6
    total.clear()
    assert total.get() is None


def test_aggregating_state(backend: KeyedStateBackend) -> None:
    average = backend.state(AggregatingStateDescriptor("avg", Average()))
    backend.set_current_key("k")
    assert average.get() is None
    for n in (1, 2, 6):
        average.add(n)
    assert average.get() == 3.0


def test_map_state(backend: KeyedStateBackend) -> None:
    m = backend.state(MapStateDescriptor("m"))
    backend.set_current_key("k1")
    assert m.is_empty()
    m.put("a", 1)
    m.put(("t", 2), [2])
    m.put_all({"c": 3})
    assert m.get("a") == 1
    assert m.get("missing") is None
    assert m.contains(("t", 2))
    assert not m.contains("missing")
    assert dict(m.items()) == {"a": 1, ("t", 2): [2], "c": 3}
    assert set(m.keys()) == {"a", ("t", 2), "c"}
    assert sorted(map(str, m.values())) == ["1", "3", "[2]"]
    m.remove("a")
    assert not m.contains("a")
    backend.set_current_key("k2")
    assert m.is_empty()
    m.put("a", "other")
    backend.set_current_key("k1")
    m.clear()
    assert m.is_empty()
    backend.set_current_key("k2")
    assert dict(m.items()) == {"a": "other"}


def test_map_get_with_a_default_tells_a_stored_none_from_an_absent_key(
    backend: KeyedStateBackend, clock: ManualClock
) -> None:
    absent = object()
    m = backend.state(MapStateDescriptor("m"))
    expiring = backend.state(MapStateDescriptor("e", ttl=timedelta(seconds=1)))
    backend.set_current_key("k")
    m.put("none", None)
    expiring.put("x", 1)
    clock.advance(1_000)
    assert m.get("none", absent) is None
    assert m.get("missing", absent) is absent
    assert m.get("missing", 0) == 0
    assert expiring.get("x", absent) is absent, "an expired entry reads as absent"


def test_map_state_can_change_while_iterating(backend: KeyedStateBackend) -> None:
    m = backend.state(MapStateDescriptor("m"))
    backend.set_current_key("k")
    m.put_all({i: i for i in range(10)})
    for key, _ in m.items():
        m.remove(key)
    assert m.is_empty()


def test_map_keys_of_one_key_never_leak_into_another(backend: KeyedStateBackend) -> None:
    # "a" + map key "bc" must not collide with "ab" + map key "c".
    m = backend.state(MapStateDescriptor("m"))
    backend.set_current_key("a")
    m.put("bc", 1)
    backend.set_current_key("ab")
    assert m.is_empty()
    assert m.get("bc") is None


def test_states_are_independent(backend: KeyedStateBackend) -> None:
    a = backend.state(ValueStateDescriptor("a"))
    b = backend.state(ValueStateDescriptor("b"))
    backend.set_current_key("k")
    a.update(1)
    assert b.value() is None


def test_same_descriptor_returns_same_state(backend: KeyedStateBackend) -> None:
    first = backend.state(ValueStateDescriptor("a"))
    assert backend.state(ValueStateDescriptor("a")) is first


def test_reregistering_with_another_kind_names_the_state(backend: KeyedStateBackend) -> None:
    backend.state(ValueStateDescriptor("counter"))
    with pytest.raises(StateMigrationError, match="counter"):
        backend.state(ListStateDescriptor("counter"))


def test_state_without_current_key_is_a_clear_error(backend: KeyedStateBackend) -> None:
    count = backend.state(ValueStateDescriptor("count"))
    with pytest.raises(NoCurrentKeyError, match="count"):
        count.value()


def test_key_outside_own_key_groups_is_rejected(new_backend) -> None:
    backend = new_backend(128, key_group_range(128, 4, 0))
    foreign = next(k for k in range(1000) if key_group(k, 128) not in backend.key_groups)
    with pytest.raises(KeyGroupOwnershipError, match=str(key_group(foreign, 128))):
        backend.set_current_key(foreign)


def test_unsupported_key_type_names_it(backend: KeyedStateBackend) -> None:
    with pytest.raises(TypeError, match="dict"):
        backend.set_current_key({"not": "a key"})


# -- TTL (processing time, since last write) ----------------------------------------


def test_value_ttl_expires_and_is_refreshed_by_writes(backend: KeyedStateBackend, clock: ManualClock) -> None:
    session = backend.state(ValueStateDescriptor("session", default="none", ttl=10))
    backend.set_current_key("u")
    session.update("open")
    clock.advance(9_999)
    assert session.value() == "open"
    session.update("still open")
    clock.advance(9_999)
    assert session.value() == "still open"
    clock.advance(1)
    assert session.value() == "none"


def test_list_ttl_is_per_element(backend: KeyedStateBackend, clock: ManualClock) -> None:
    events = backend.state(ListStateDescriptor("events", ttl=timedelta(seconds=5)))
    backend.set_current_key("u")
    events.add("old")
    clock.advance(3_000)
    events.add("new")
    clock.advance(2_000)
    assert events.get() == ["new"]
    clock.advance(3_000)
    assert events.get() == []


def test_map_ttl_is_per_entry(backend: KeyedStateBackend, clock: ManualClock) -> None:
    seen = backend.state(MapStateDescriptor("seen", ttl=5))
    backend.set_current_key("u")
    seen.put("old", 1)
    clock.advance(3_000)
    seen.put("new", 2)
    clock.advance(2_000)
    assert dict(seen.items()) == {"new": 2}
    assert not seen.contains("old")
    assert seen.get("old") is None


def test_reducing_ttl(backend: KeyedStateBackend, clock: ManualClock) -> None:
    total = backend.state(ReducingStateDescriptor("sum", lambda a, b: a + b, ttl=1))
    backend.set_current_key("u")
    total.add(1)
    clock.advance(1_000)
    total.add(5)
    assert total.get() == 5


def test_invalid_ttl_names_the_state() -> None:
    with pytest.raises(ValueError, match="session"):
        ValueStateDescriptor("session", ttl=0)


def test_invalid_descriptors() -> None:
    with pytest.raises(ValueError, match="name"):
        ValueStateDescriptor("")
    with pytest.raises(TypeError, match="total"):
        ReducingStateDescriptor("total", "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="avg"):
        AggregatingStateDescriptor("avg", lambda a: a)  # type: ignore[arg-type]


class JsonSerializer:
    """A user serializer: proves values really go through the descriptor's serializer."""

    def dumps(self, value: object) -> bytes:
        return json.dumps(value).encode()

    def loads(self, data: bytes) -> object:
        return json.loads(data)


def test_pluggable_value_serializer(backend: KeyedStateBackend) -> None:
    doc = backend.state(ValueStateDescriptor("doc", serializer=JsonSerializer()))
    backend.set_current_key("k")
    doc.update({"a": (1, 2)})
    # RocksDB serializes on every write, so JSON turns the tuple into a list at once;
    # the heap keeps objects and serializes only in snapshots.
    expected = {"a": [1, 2]} if backend.kind == "rocksdb" else {"a": (1, 2)}
    assert doc.value() == expected


def test_expired_entries_are_deleted_when_read(backend: KeyedStateBackend, clock: ManualClock) -> None:
    session = backend.state(ValueStateDescriptor("session", ttl=1))
    seen = backend.state(MapStateDescriptor("seen", ttl=1))
    backend.set_current_key("u")
    session.update("open")
    seen.put("page", 1)
    clock.advance(1_000)
    assert session.value() is None
    assert seen.get("page") is None
    frozen = backend.freeze()
    try:
        rows = sum(1 for t in frozen.values() for g in range(128) for _ in t.entries(g))
    finally:
        for table in frozen.values():
            table.release()
    assert rows == 0


# -- incremental TTL cleanup (entries nobody reads again) ----------------------------


def _open_sessions(backend: KeyedStateBackend, users: range) -> ValueState:
    """A 1 ms-TTL `session` state with an open session for each of `users`."""
    session = backend.state(ValueStateDescriptor("session", ttl=1))
    for user in users:
        backend.set_current_key(user)
        session.update("open")
    return session


def _stored(backend: KeyedStateBackend, state: str) -> list[bytes]:
    """The stored bytes of `state`, expired or not: what a snapshot would read."""
    frozen = backend.freeze()
    try:
        return [data for g in backend.key_groups for _, data in frozen[state].entries(g)]
    finally:
        for table in frozen.values():
            table.release()


def test_incremental_cleanup_deletes_expired_entries_nobody_reads(
    backend: KeyedStateBackend, clock: ManualClock
) -> None:
    session = backend.state(ValueStateDescriptor("session", ttl=10))
    events = backend.state(ListStateDescriptor("events", ttl=10))
    seen = backend.state(MapStateDescriptor("seen", ttl=10))
    count = backend.state(ValueStateDescriptor("count"))  # no TTL: never touched
    for user in range(300):
        backend.set_current_key(user)
        session.update("old")
        events.add("old")
        seen.put_all({"home": 1, "cart": 1})
        count.update(user)
    clock.advance(5_000)
    for user in range(100):  # written again: these stay
        backend.set_current_key(user)
        session.update("new")
        events.add("new")
        seen.put("home", 2)
    clock.advance(6_000)  # the first writes have expired, the second have not

    dropped = [backend.drop_expired(budget=150) for _ in range(12)]
    assert all(d <= 150 for d in dropped), dropped
    # 200 sessions, 200 whole lists, 400 + 100 map entries; the 100 lists that keep
    # their new element are rewritten, not deleted.
    assert sum(dropped) == 200 + 200 + 500
    assert len(_stored(backend, "session")) == 100
    assert len(_stored(backend, "seen")) == 100
    assert len(_stored(backend, "count")) == 300
    lists = [codec_for(ListStateDescriptor("events", ttl=10)).loads(d) for d in _stored(backend, "events")]
    assert [len(stored) for stored in lists] == [1] * 100, "expired elements are dropped from kept lists"
    backend.set_current_key(7)
    assert (session.value(), events.get(), seen.get("home"), count.value()) == ("new", ["new"], 2, 7)
    backend.set_current_key(250)
    assert (session.value(), events.get(), count.value()) == (None, [], 250)


def test_incremental_cleanup_is_bounded_and_resumes_where_it_stopped(
    backend: KeyedStateBackend, clock: ManualClock
) -> None:
    _open_sessions(backend, range(1_000))
    assert backend.drop_expired(budget=300) == 0, "nothing has expired yet"
    clock.advance(1_000)
    # The pass resumes after the 300 entries already examined, wraps after the
    # 1,000th, and ends where it began.
    assert [backend.drop_expired(budget=300) for _ in range(5)] == [300, 300, 100, 300, 0]
    assert _stored(backend, "session") == []


def test_incremental_cleanup_budget_grows_with_the_backlog_and_shrinks_back(
    backend: KeyedStateBackend, clock: ManualClock
) -> None:
    _open_sessions(backend, range(70_000))
    clock.advance(1_000)
    # At the least budget a pass would take 7 checkpoints; doubling takes 3.
    assert [backend.drop_expired() for _ in range(4)] == [10_000, 20_000, 40_000, 0]
    assert _stored(backend, "session") == []
    _open_sessions(backend, range(20_000))  # live entries only: the budget halves back to 10,000
    assert [backend.drop_expired() for _ in range(3)] == [0, 0, 0]
    clock.advance(1_000)
    assert backend.drop_expired() == 10_000, "a quiet job pays for the least budget again"
