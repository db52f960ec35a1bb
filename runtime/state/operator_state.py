"""Operator (non-keyed) state: bound to a subtask, redistributed by its mode.

- list state ("split"): on restore the elements of all old subtasks are
  concatenated and split evenly, in order, over the new subtasks;
- union list state ("union"): every new subtask receives all elements;
- broadcast state ("broadcast"): a map that is the same on every subtask;
  each new subtask receives old subtask 0's copy.

Operator state is small (source offsets, sink transactions), so its snapshot
is serialized in the synchronous part.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from lockgate.runtime.key_serializer import deserialize_key, serialize_key
from lockgate.runtime.serializers import DEFAULT_SERIALIZER, Serializer
from lockgate.runtime.varint import decode_varint, encode_varint

Mode = Literal["split", "union", "broadcast"]
_State = TypeVar("_State", "OperatorListState", "BroadcastState")
MAGIC = b"LGOS\x01"


class OperatorListState:
    def __init__(self) -> None:
        self._elements: list[Any] = []

    def get(self) -> list[Any]:
        return list(self._elements)

    def add(self, value: Any) -> None:
        self._elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self._elements = list(values)

    def clear(self) -> None:
        self._elements = []


class BroadcastState:
    """A map that every subtask holds identically; keys follow the key rules."""

    def __init__(self) -> None:
        self._entries: dict[bytes, Any] = {}

    def get(self, key: Any) -> Any:
        return self._entries.get(serialize_key(key))

    def put(self, key: Any, value: Any) -> None:
        self._entries[serialize_key(key)] = value

    def contains(self, key: Any) -> bool:
        return serialize_key(key) in self._entries

    def remove(self, key: Any) -> None:
        self._entries.pop(serialize_key(key), None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return ((deserialize_key(k), v) for k, v in list(self._entries.items()))

    def keys(self) -> Iterator[Any]:
        return (key for key, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def clear(self) -> None:
        self._entries.clear()


@dataclass
class OperatorStateSnapshot:
    """Serialized operator state of one subtask: per state its mode and elements."""

    states: dict[str, tuple[Mode, list[bytes]]] = field(default_factory=dict)

    def encode(self) -> bytes:
        header = json.dumps(
            {name: {"mode": mode, "count": len(items)} for name, (mode, items) in self.states.items()}
        ).encode("utf-8")
        out = bytearray(MAGIC)
        out += encode_varint(len(header)) + header
        for _, items in self.states.values():
            for item in items:
                out += encode_varint(len(item)) + item
        return bytes(out)

    @staticmethod
    def decode(data: bytes) -> OperatorStateSnapshot:
        if not data.startswith(MAGIC):
            raise ValueError("not an operator state snapshot (bad magic)")
        length, pos = decode_varint(data, len(MAGIC))
        header: dict[str, Any] = json.loads(data[pos : pos + length])
        pos += length
        states: dict[str, tuple[Mode, list[bytes]]] = {}
        for name, info in header.items():
            items = []
            for _ in range(int(info["count"])):
                size, pos = decode_varint(data, pos)
                items.append(data[pos : pos + size])
                pos += size
            states[name] = (info["mode"], items)
        if pos != len(data):
            raise ValueError("operator state snapshot has trailing bytes")
        return OperatorStateSnapshot(states)


class OperatorStateStore:
    """The operator states of one subtask, by name."""

    def __init__(self, serializer: Serializer = DEFAULT_SERIALIZER) -> None:
        self._serializer = serializer
        self._states: dict[str, tuple[Mode, OperatorListState | BroadcastState]] = {}
        self._restored = OperatorStateSnapshot()

    def list_state(self, name: str) -> OperatorListState:
        return self._get(name, "split", OperatorListState)

    def union_list_state(self, name: str) -> OperatorListState:
        return self._get(name, "union", OperatorListState)

    def broadcast_state(self, name: str) -> BroadcastState:
        return self._get(name, "broadcast", BroadcastState)

    def _get(self, name: str, mode: Mode, make: type[_State]) -> _State:
        existing = self._states.get(name)
        if existing is not None:
            if existing[0] != mode:
                raise ValueError(
                    f"operator state {name!r} is {existing[0]} state; it cannot also be {mode} state"
                )
            assert isinstance(existing[1], make)  # the mode says which
            return existing[1]
        restored = self._restored.states.pop(name, None)
        if restored is not None and restored[0] != mode:
            raise ValueError(
                f"operator state {name!r} was restored as {restored[0]} state but is now "
                f"requested as {mode} state; use a new name to change its mode"
            )
        state = make()
        if restored is not None:
            items = restored[1]
            loads = self._serializer.loads
            if isinstance(state, OperatorListState):
                state.update(loads(item) for item in items)
            else:  # a map: its keys and values, alternating
                for key, value in zip(items[0::2], items[1::2], strict=True):
                    state._entries[key] = loads(value)
        self._states[name] = (mode, state)
        return state

    def snapshot(self) -> OperatorStateSnapshot:
        dumps = self._serializer.dumps
        states = dict(self._restored.states)  # restored but not (yet) requested: kept
        for name, (mode, state) in self._states.items():
            if isinstance(state, OperatorListState):
                states[name] = (mode, [dumps(v) for v in state.get()])
            else:  # a map: its keys and values, alternating
                pairs = ((key, dumps(value)) for key, value in state._entries.items())
                states[name] = (mode, list(itertools.chain.from_iterable(pairs)))
        return OperatorStateSnapshot(states)

    def restore(self, snapshot: OperatorStateSnapshot) -> None:
        if self._states:
            raise RuntimeError("operator state must be restored before any state is requested")
        self._restored = OperatorStateSnapshot(dict(snapshot.states))


def _split_evenly(items: list[bytes], parallelism: int, index: int) -> list[bytes]:
    return items[index * len(items) // parallelism : (index + 1) * len(items) // parallelism]


def redistribute(old: list[OperatorStateSnapshot], parallelism: int) -> list[OperatorStateSnapshot]:
    """Assign the operator state of `old` subtasks (in subtask order) to `parallelism` new ones."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, got {parallelism}")
    modes: dict[str, Mode] = {}
    gathered: dict[str, list[bytes]] = {}
    for subtask, snapshot in enumerate(old):
        for name, (mode, items) in snapshot.states.items():
            if modes.setdefault(name, mode) != mode:
                raise ValueError(
                    f"operator state {name!r} is {modes[name]} state in one subtask and "
                    f"{mode} state in subtask {subtask}"
                )
            if mode == "broadcast":
                gathered.setdefault(name, items)
            else:
                gathered.setdefault(name, []).extend(items)
    assigned = []
    for index in range(parallelism):
        states: dict[str, tuple[Mode, list[bytes]]] = {}
        for name, mode in modes.items():
            items = gathered[name]
            share = _split_evenly(items, parallelism, index) if mode == "split" else list(items)
            states[name] = (mode, share)
        assigned.append(OperatorStateSnapshot(states))
    return assigned
