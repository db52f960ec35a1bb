"""The storage primitives a keyed state backend provides to the state kinds.

A state is stored in one table. Value, list, reducing and aggregating states
keep one stored object per key (`ValueTable`); map state keeps one per
(key, map key) (`MapTable`). Every table is addressed through the backend's
`CurrentKey`, set once per record.

For snapshots a table is frozen (the synchronous part) and its entries are
then read per key group as `(rest, data)` byte pairs (the asynchronous part):
`rest` is the serialized key, followed for map state by the serialized map key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Protocol

from lockgate.runtime.varint import decode_varint, encode_varint


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""Returned by table reads for an absent entry (None is a legal stored value)."""


class CurrentKey:
    """The key the backend is processing now, in the forms the tables need."""

    __slots__ = ("_map_prefix", "db_prefix", "key", "key_bytes", "key_group")

    def __init__(self) -> None:
        self.key: Any = None
        self.key_bytes = b""
        self.key_group = -1
        # RocksDB row of value-like states: key group (2 bytes, big endian) + key.
        self.db_prefix = b""
        self._map_prefix: bytes | None = None

    def set(self, key: Any, key_bytes: bytes, key_group: int) -> None:
        self.key = key
        self.key_bytes = key_bytes
        self.key_group = key_group
        self.db_prefix = key_group.to_bytes(2, "big") + key_bytes
        self._map_prefix = None  # built when a map state asks: set runs for every record

    @property
    def map_prefix(self) -> bytes:
        """Prefix of the rows of one key in map state; length-prefixed so that no
        key's prefix is a prefix of another key's."""
        if self._map_prefix is None:
            key_bytes = self.key_bytes
            self._map_prefix = self.key_group.to_bytes(2, "big") + encode_varint(len(key_bytes)) + key_bytes
        return self._map_prefix

    @property
    def is_set(self) -> bool:
        return self.key_group >= 0


def map_rest(key_bytes: bytes, map_key_bytes: bytes) -> bytes:
    """The canonical `rest` of a map entry: length-prefixed key, then map key."""
    return encode_varint(len(key_bytes)) + key_bytes + map_key_bytes


def split_map_rest(rest: bytes) -> tuple[bytes, bytes]:
    """Inverse of `map_rest`: (key bytes, map key bytes)."""
    length, pos = decode_varint(rest, 0)
    return rest[pos : pos + length], rest[pos + length :]


class ValueTable(Protocol):
    def get(self, current: CurrentKey) -> Any: ...

    def put(self, current: CurrentKey, stored: Any) -> None: ...

    def delete(self, current: CurrentKey) -> None: ...


class MapTable(Protocol):
    def get(self, current: CurrentKey, map_key: bytes) -> Any: ...

    def put(self, current: CurrentKey, map_key: bytes, stored: Any) -> None: ...

    def delete(self, current: CurrentKey, map_key: bytes) -> None: ...

    def items(self, current: CurrentKey) -> Iterator[tuple[bytes, Any]]:
        """(serialized map key, stored object) pairs of the current key."""
        ...

    def clear(self, current: CurrentKey) -> None: ...


class FrozenTable(Protocol):
    """A table as it was at the synchronous part of a snapshot."""

    def entries(self, key_group: int) -> Iterator[tuple[bytes, bytes]]: ...

    def release(self) -> None: ...


class FrozenGroups:
    """A `FrozenTable` over copies of a table's key groups: `pairs` turns one group's
    (non-empty) copy into its `(rest, data)` pairs when the group is read."""

    def __init__(self, groups: dict[int, Any], pairs: Callable[[Any], Iterable[tuple[bytes, bytes]]]) -> None:
        self._groups = groups
        self._pairs = pairs

    def entries(self, key_group: int) -> Iterator[tuple[bytes, bytes]]:
        rows = self._groups.get(key_group)
        if rows:
            yield from self._pairs(rows)

    def release(self) -> None:
        self._groups = {}
