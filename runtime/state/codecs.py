"""How a state's stored objects become bytes, and how TTL is encoded.

Both backends use the same codec for a state, so the canonical snapshot bytes
do not depend on the backend that wrote them. With TTL, a stored value is
`(expires_at_ms, value)` and its bytes start with the 8-byte expiry, so
expiry can be checked without deserializing the value.
"""

from __future__ import annotations

from typing import Any, Protocol

from lockgate.runtime.serializers import Serializer
from lockgate.runtime.state.descriptors import StateDescriptor, StateKind

_EXPIRY_BYTES = 8


class Codec(Protocol):
    def dumps(self, stored: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...

    def compact(self, data: bytes, now_ms: int) -> bytes | None:
        """`data` without its expired parts, or None when nothing is left."""
        ...

    def alive(self, stored: Any, now_ms: int) -> Any:
        """`stored` (an object) without its expired parts, or None when nothing is left."""
        ...


class PlainCodec:
    def __init__(self, serializer: Serializer) -> None:
        self.dumps = serializer.dumps
        self.loads = serializer.loads

    def compact(self, data: bytes, now_ms: int) -> bytes | None:
        return data

    def alive(self, stored: Any, now_ms: int) -> Any:
        return stored


class TtlCodec:
    """Stored objects are `(expires_at_ms, value)`."""

    def __init__(self, serializer: Serializer) -> None:
        self._serializer = serializer

    def dumps(self, stored: Any) -> bytes:
        expires_at, value = stored
        return int(expires_at).to_bytes(_EXPIRY_BYTES, "big") + self._serializer.dumps(value)

    def loads(self, data: bytes) -> Any:
        expires_at = int.from_bytes(data[:_EXPIRY_BYTES], "big")
        return (expires_at, self._serializer.loads(data[_EXPIRY_BYTES:]))

    def compact(self, data: bytes, now_ms: int) -> bytes | None:
        return None if int.from_bytes(data[:_EXPIRY_BYTES], "big") <= now_ms else data

    def alive(self, stored: Any, now_ms: int) -> Any:
        return None if stored[0] <= now_ms else stored


class TtlListCodec(PlainCodec):
    """Stored objects are lists of `(expires_at_ms, element)`, serialized as they are."""

    def compact(self, data: bytes, now_ms: int) -> bytes | None:
        elements = self.loads(data)
        kept = self.alive(elements, now_ms)
        if kept is None:
            return None
        return data if kept is elements else self.dumps(kept)

    def alive(self, stored: Any, now_ms: int) -> Any:
        kept = [entry for entry in stored if entry[0] > now_ms]
        if not kept:
            return None
        return stored if len(kept) == len(stored) else kept


def codec_for(descriptor: StateDescriptor) -> Codec:
    return stored_codec(descriptor.kind, descriptor.ttl_ms is not None, descriptor.serializer)


def stored_codec(kind: StateKind, ttl: bool, serializer: Serializer) -> Codec:
    """The codec of a state of `kind`, with TTL or not: what a snapshot records of a
    state (`StateMeta`) and its serializer are enough to read its bytes."""
    if not ttl:
        return PlainCodec(serializer)
    if kind is StateKind.LIST:
        return TtlListCodec(serializer)
    return TtlCodec(serializer)
