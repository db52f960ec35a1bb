"""Heap backend: Python dicts per key group, objects kept deserialized.

Fast for small state. The synchronous part of a snapshot copies the dicts
(C-speed shallow copies; stored objects are immutable by contract), the
asynchronous part serializes the copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from lockgate.runtime.backends.heap.timer_queue import HeapTimerQueue
from lockgate.runtime.backends.heap.ttl_sweep import KeyGroupsSweep
from lockgate.runtime.clock import Clock
from lockgate.runtime.snapshot.canonical import CanonicalSnapshotStrategy
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.state.backend import StateMeta
from lockgate.runtime.state.codecs import Codec, codec_for
from lockgate.runtime.state.descriptors import StateDescriptor
from lockgate.runtime.state.tables import (
    MISSING,
    CurrentKey,
    FrozenGroups,
    FrozenTable,
    map_rest,
    split_map_rest,
)

RawEntries = dict[int, list[tuple[bytes, bytes]]]
_Table = TypeVar("_Table", "HeapValueTable", "HeapMapTable", HeapTimerQueue)


class HeapValueTable:
    def __init__(self, descriptor: StateDescriptor, key_groups: range) -> None:
        self.descriptor = descriptor
        self.codec: Codec = codec_for(descriptor)
        self.groups: dict[int, dict[bytes, Any]] = {group: {} for group in key_groups}

    def get(self, current: CurrentKey) -> Any:
        return self.groups[current.key_group].get(current.key_bytes, MISSING)

    def put(self, current: CurrentKey, stored: Any) -> None:
        self.groups[current.key_group][current.key_bytes] = stored

    def delete(self, current: CurrentKey) -> None:
        self.groups[current.key_group].pop(current.key_bytes, None)

    def freeze(self) -> FrozenTable:
        copies = {group: rows.copy() for group, rows in self.groups.items() if rows}
        dumps = self.codec.dumps
        return FrozenGroups(copies, lambda rows: ((key, dumps(stored)) for key, stored in rows.items()))

    def load(self, key_group: int, entries: Iterable[tuple[bytes, bytes]]) -> None:
        loads = self.codec.loads
        self.groups[key_group].update((rest, loads(data)) for rest, data in entries)


class HeapMapTable:
    def __init__(self, descriptor: StateDescriptor, key_groups: range) -> None:
        self.descriptor = descriptor
        self.codec: Codec = codec_for(descriptor)
        self.groups: dict[int, dict[bytes, dict[bytes, Any]]] = {g: {} for g in key_groups}

    def get(self, current: CurrentKey, map_key: bytes) -> Any:
        entries = self.groups[current.key_group].get(current.key_bytes)
        return MISSING if entries is None else entries.get(map_key, MISSING)

    def put(self, current: CurrentKey, map_key: bytes, stored: Any) -> None:
        rows = self.groups[current.key_group]
        entries = rows.get(current.key_bytes)
        if entries is None:
            rows[current.key_bytes] = {map_key: stored}
        else:
            entries[map_key] = stored

    def delete(self, current: CurrentKey, map_key: bytes) -> None:
        rows = self.groups[current.key_group]
        entries = rows.get(current.key_bytes)
        if entries is not None:
            entries.pop(map_key, None)
            if not entries:
                del rows[current.key_bytes]

    def items(self, current: CurrentKey) -> Iterator[tuple[bytes, Any]]:
        entries = self.groups[current.key_group].get(current.key_bytes)
        # A copy, so the caller may change the map while iterating.
        return iter(list(entries.items())) if entries else iter(())

    def clear(self, current: CurrentKey) -> None:
        self.groups[current.key_group].pop(current.key_bytes, None)

    def freeze(self) -> FrozenTable:
        copies = {
            group: {key: entries.copy() for key, entries in rows.items()}
            for group, rows in self.groups.items()
            if rows
        }
        dumps = self.codec.dumps
        return FrozenGroups(
            copies,
            lambda rows: (
                (map_rest(key, map_key), dumps(stored))
                for key, entries in rows.items()
                for map_key, stored in entries.items()
            ),
        )

    def load(self, key_group: int, entries: Iterable[tuple[bytes, bytes]]) -> None:
        rows = self.groups[key_group]
        loads = self.codec.loads
        for rest, data in entries:
            key, map_key = split_map_rest(rest)
            rows.setdefault(key, {})[map_key] = loads(data)


class HeapKeyedStateBackend(CheckpointableKeyedStateBackend):
    kind = "heap"

    def __init__(self, max_parallelism: int, key_groups: range, clock: Clock | None = None) -> None:
        super().__init__(max_parallelism, key_groups, clock)
        self._tables: dict[str, HeapValueTable | HeapMapTable | HeapTimerQueue] = {}
        # Restored states are kept as bytes until registered: decoding needs the
        # descriptor's serializer, and a state nobody registers must survive.
        self._pending: dict[str, RawEntries] = {}
        self._checkpoints = CanonicalSnapshotStrategy(self)

    @property
    def checkpoint_strategy(self) -> CanonicalSnapshotStrategy:
        return self._checkpoints

    def _value_table(self, descriptor: StateDescriptor) -> HeapValueTable:
        return self._adopt(descriptor.name, HeapValueTable(descriptor, self.key_groups))

    def _map_table(self, descriptor: StateDescriptor) -> HeapMapTable:
        return self._adopt(descriptor.name, HeapMapTable(descriptor, self.key_groups))

    def _make_timer_queue(self, name: str) -> HeapTimerQueue:
        return self._adopt(name, HeapTimerQueue(self.key_groups))

    def _adopt(self, name: str, table: _Table) -> _Table:
        """`table`, holding what was restored of state `name`, swept if its state has a TTL."""
        for group, entries in self._pending.pop(name, {}).items():
            table.load(group, entries)
        self._tables[name] = table
        if not isinstance(table, HeapTimerQueue) and table.descriptor.ttl_ms is not None:
            is_map = isinstance(table, HeapMapTable)
            self._ttl_cleanup.add(KeyGroupsSweep(table.groups, table.codec.alive, is_map))
        return table

    def freeze(self) -> dict[str, FrozenTable]:
        frozen: dict[str, FrozenTable] = {n: t.freeze() for n, t in self._tables.items()}
        for name, groups in self._pending.items():
            # Restored bytes of a state no function has registered yet, as they are.
            frozen[name] = FrozenGroups({g: list(rows) for g, rows in groups.items()}, iter)
        return frozen

    def load(
        self, state: str, meta: StateMeta, key_group: int, entries: Iterable[tuple[bytes, bytes]]
    ) -> None:
        self._accept_restored(state, meta, key_group)
        table = self._tables.get(state)
        if table is not None:
            table.load(key_group, entries)
        else:
            self._pending.setdefault(state, {}).setdefault(key_group, []).extend(entries)

    def close(self) -> None:
        self._tables.clear()
        self._pending.clear()
