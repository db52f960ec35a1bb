"""The keyed state kinds users call, written once over the backend tables.

Stored objects are treated as immutable: every change stores a new object, so
a heap snapshot's shallow copy stays the picture of its instant. Users must
not mutate a value after handing it to `update`/`put`/`add` either.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lockgate.runtime.clock import Clock
from lockgate.runtime.key_serializer import deserialize_key, serialize_key
from lockgate.runtime.state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from lockgate.runtime.state.tables import MISSING, CurrentKey, MapTable, ValueTable


class NoCurrentKeyError(RuntimeError):
    pass


class _KeyedState:
    """Shared plumbing: the table, the current key and the TTL clock."""

    def __init__(self, descriptor: StateDescriptor, table: Any, current: CurrentKey, clock: Clock) -> None:
        self.name = descriptor.name
        self._table = table
        self._current = current
        self._clock = clock
        self._ttl_ms = descriptor.ttl_ms

    def _key(self) -> CurrentKey:
        current = self._current
        if current.key_group < 0:
            raise NoCurrentKeyError(
                f"keyed state {self.name!r} was used with no current key: keyed state is only "
                "available in a keyed context (after key_by, inside process)"
            )
        return current

    def _expires_at(self) -> int:
        assert self._ttl_ms is not None
        return self._clock.now_ms() + self._ttl_ms

    def _read(self) -> Any:
        """The stored object of the current key, or MISSING (also when expired)."""
        current = self._key()
        stored = self._table.get(current)
        if stored is MISSING or self._ttl_ms is None:
            return stored
        if stored[0] <= self._clock.now_ms():
            self._table.delete(current)  # cleanup on read: expired entries free space
            return MISSING
        return stored[1]

    def _write(self, value: Any) -> None:
        stored = value if self._ttl_ms is None else (self._expires_at(), value)
        self._table.put(self._key(), stored)

    def clear(self) -> None:
        self._table.delete(self._key())


class ValueState(_KeyedState):
    """One value per key. `value()` is the descriptor's default until something was stored."""

    def __init__(
        self, descriptor: ValueStateDescriptor, table: ValueTable, current: CurrentKey, clock: Clock
    ) -> None:
        super().__init__(descriptor, table, current, clock)
        self._default = descriptor.default

    def value(self) -> Any:
        """The current key's value, or the descriptor's default (None unless given) when
        there is none or it expired."""
        current = self._current
        # Without TTL and with a key (the common case), in one call.
        stored = self._table.get(current) if self._ttl_ms is None and current.key_group >= 0 else self._read()
        return self._default if stored is MISSING else stored

    def update(self, value: Any) -> None:
        """Store `value`; `None` clears the state (as in Flink)."""
        current = self._current
        if value is None:
            self.clear()
        elif self._ttl_ms is None and current.key_group >= 0:  # the common case, in one call
            self._table.put(current, value)
        else:
            self._write(value)


class ListState(_KeyedState):
    """TTL, when set, applies to each element on its own."""

    def _stored_elements(self) -> list[Any]:
        stored = self._table.get(self._key())
        if stored is MISSING:
            return []
        if self._ttl_ms is None:
            return list(stored)
        now = self._clock.now_ms()
        return [entry for entry in stored if entry[0] > now]

    def _wrap(self, values: Iterable[Any]) -> list[Any]:
        checked = []
        for value in values:
            if value is None:
                raise ValueError(f"list state {self.name!r}: None cannot be added to a list")
            checked.append(value)
        if self._ttl_ms is None:
            return checked
        expires_at = self._expires_at()
        return [(expires_at, value) for value in checked]

    def get(self) -> list[Any]:
        """The current key's elements, oldest first (an empty list when there are none)."""
        stored = self._stored_elements()
        return stored if self._ttl_ms is None else [element for _, element in stored]

    def add(self, value: Any) -> None:
        """Append `value` to the current key's list (None is refused)."""
        self.add_all((value,))

    def add_all(self, values: Iterable[Any]) -> None:
        """Append each of `values`, in order."""
        added = self._wrap(values)
        if added:
            self._table.put(self._key(), self._stored_elements() + added)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the current key's list with `values`; an empty iterable clears it."""
        replaced = self._wrap(values)
        if replaced:
            self._table.put(self._key(), replaced)
        else:
            self.clear()


class ReducingState(_KeyedState):
    """One value per key, folded by the descriptor's `reduce_fn(a, b)` as values are added."""

    def __init__(
        self, descriptor: ReducingStateDescriptor, table: ValueTable, current: CurrentKey, clock: Clock
    ) -> None:
        super().__init__(descriptor, table, current, clock)
        self._reduce = descriptor.reduce_fn

    def get(self) -> Any:
        """The reduced value of the current key, or None when nothing was added."""
        stored = self._read()
        return None if stored is MISSING else stored

    def add(self, value: Any) -> None:
        """Fold `value` into the current key's value with `reduce_fn(current, value)`."""
        stored = self._read()
        self._write(value if stored is MISSING else self._reduce(stored, value))


class AggregatingState(_KeyedState):
    """One accumulator per key, of the descriptor's AggregateFunction: `add` folds a value
    in, `get` returns the function's result."""

    def __init__(
        self, descriptor: AggregatingStateDescriptor, table: ValueTable, current: CurrentKey, clock: Clock
    ) -> None:
        super().__init__(descriptor, table, current, clock)
        self._agg = descriptor.agg_fn

    def get(self) -> Any:
        """`get_result` of the current key's accumulator, or None when nothing was added."""
        stored = self._read()
        return None if stored is MISSING else self._agg.get_result(stored)

    def add(self, value: Any) -> None:
        """Fold `value` into the current key's accumulator (a new one first, when it has
        none)."""
        stored = self._read()
        accumulator = self._agg.create_accumulator() if stored is MISSING else stored
        self._write(self._agg.add(value, accumulator))


class MapState(_KeyedState):
    """Map keys follow the key rules (str, int, tuples, registered types...)."""

    _table: MapTable

    def _alive(self, stored: Any) -> Any:
        if stored is MISSING or self._ttl_ms is None:
            return stored
        return MISSING if stored[0] <= self._clock.now_ms() else stored[1]

    def _entry(self, key: Any) -> Any:
        current, map_key = self._key(), serialize_key(key)
        stored = self._table.get(current, map_key)
        alive = self._alive(stored)
        if alive is MISSING and stored is not MISSING:
            self._table.delete(current, map_key)  # cleanup on read
        return alive

    def get(self, key: Any, default: Any = None) -> Any:
        """The value under `key`, or `default` when there is none: a sentinel default
        tells an absent key from a stored None in one read."""
        stored = self._entry(key)
        return default if stored is MISSING else stored

    def contains(self, key: Any) -> bool:
        """Whether the current key's map holds `key` (an expired entry does not count)."""
        return self._entry(key) is not MISSING

    def put(self, key: Any, value: Any) -> None:
        """Set `key` to `value` in the current key's map."""
        stored = value if self._ttl_ms is None else (self._expires_at(), value)
        self._table.put(self._key(), serialize_key(key), stored)

    def put_all(self, entries: dict[Any, Any]) -> None:
        """Set each key of `entries` to its value."""
        for key, value in entries.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        """Remove `key` from the current key's map (nothing happens when it is absent)."""
        self._table.delete(self._key(), serialize_key(key))

    def items(self) -> Iterator[tuple[Any, Any]]:
        """The (key, value) pairs of the current key's map, in the order of their
        serialized keys."""
        for map_key, stored in self._table.items(self._key()):
            alive = self._alive(stored)
            if alive is not MISSING:
                yield deserialize_key(map_key), alive

    def keys(self) -> Iterator[Any]:
        """The keys of the current key's map."""
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        """The values of the current key's map."""
        return (value for _, value in self.items())

    def is_empty(self) -> bool:
        """Whether the current key's map holds no (unexpired) entry."""
        return next(self.items(), None) is None

    def clear(self) -> None:
        """Remove every entry of the current key's map."""
        self._table.clear(self._key())
