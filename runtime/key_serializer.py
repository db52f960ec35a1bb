"""Stable, reversible bytes for keys.

Key groups and state lookups need the same bytes for the same key in every
process, so Python's `hash()` (salted per process) is never used. Each
encoding starts with a type tag: keys of different types are different keys
(`1`, `1.0` and `True` are three keys), unlike in a Python dict.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from lockgate.runtime.varint import decode_varint, encode_varint

Key: TypeAlias = Any

_NONE = 0x00
_FALSE = 0x01
_TRUE = 0x02
_INT = 0x03
_FLOAT = 0x04
_STR = 0x05
_BYTES = 0x06
_TUPLE = 0x07
_CUSTOM = 0x08

_DOUBLE = struct.Struct(">d")


@dataclass(frozen=True)
class CustomKeyType:
    """A user key type: `type_id` is written into the bytes, so it must not change."""

    cls: type
    type_id: str
    to_bytes: Callable[[Any], bytes]
    from_bytes: Callable[[bytes], Any]


_by_class: dict[type, CustomKeyType] = {}
_by_id: dict[str, CustomKeyType] = {}


def register_key_type(
    cls: type,
    type_id: str,
    to_bytes: Callable[[Any], bytes],
    from_bytes: Callable[[bytes], Any],
) -> None:
    """Let instances of `cls` be keys. `to_bytes` must be deterministic across processes."""
    if not type_id:
        raise ValueError("register_key_type: type_id must be a non-empty string")
    existing = _by_id.get(type_id)
    if existing is not None and existing.cls is not cls:
        raise ValueError(
            f"register_key_type: type_id {type_id!r} is already used by "
            f"{existing.cls.__qualname__}; choose another id for {cls.__qualname__}"
        )
    custom = CustomKeyType(cls, type_id, to_bytes, from_bytes)
    _by_class[cls] = custom
    _by_id[type_id] = custom


def serialize_key(key: Key) -> bytes:
    """The stable bytes of `key`; `TypeError` naming the type if it has no encoding."""
    kind = type(key)
    if kind is str:
        text: str = key
        return b"\x05" + text.encode("utf-8")
    if kind is int:  # two's complement, as few bytes as hold the sign
        number: int = key
        return b"\x03" + number.to_bytes((number + (number < 0)).bit_length() // 8 + 1, "big", signed=True)
    if kind is bytes:
        raw: bytes = key
        return b"\x06" + raw
    if kind is tuple:
        parts = [b"\x07"]
        for item in key:
            encoded = serialize_key(item)
            parts.append(encode_varint(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    if key is None:
        return b"\x00"
    if kind is bool:
        return b"\x02" if key else b"\x01"
    if kind is float:
        # -0.0 == 0.0 in Python, so they must be the same key.
        return b"\x04" + _DOUBLE.pack(key + 0.0)
    custom = _by_class.get(kind)
    if custom is not None:
        type_id = custom.type_id.encode("utf-8")
        return b"\x08" + encode_varint(len(type_id)) + type_id + custom.to_bytes(key)
    raise TypeError(
        f"cannot use a key of type {kind.__module__}.{kind.__qualname__}: keys must be "
        "str, bytes, int, float, bool, None or tuples of these; register other types "
        "with lockgate.runtime.register_key_type(cls, type_id, to_bytes, from_bytes)"
    )


def deserialize_key(data: bytes) -> Key:
    """Inverse of `serialize_key`."""
    if not data:
        raise ValueError("cannot deserialize an empty key")
    tag = data[0]
    body = data[1:]
    if tag == _STR:
        return body.decode("utf-8")
    if tag == _INT:
        return int.from_bytes(body, "big", signed=True)
    if tag == _BYTES:
        return bytes(body)
    if tag == _TUPLE:
        return _deserialize_tuple(data)
    if tag == _NONE:
        return None
    if tag in (_FALSE, _TRUE):
        return tag == _TRUE
    if tag == _FLOAT:
        return _DOUBLE.unpack(body)[0]
    if tag == _CUSTOM:
        length, pos = decode_varint(data, 1)
        type_id = data[pos : pos + length].decode("utf-8")
        custom = _by_id.get(type_id)
        if custom is None:
            raise TypeError(
                f"key was written with custom key type {type_id!r}, which is not registered "
                "in this process; call register_key_type before restoring"
            )
        return custom.from_bytes(data[pos + length :])
    raise ValueError(f"unknown key type tag 0x{tag:02x}")


def _deserialize_tuple(data: bytes) -> tuple[Key, ...]:
    items = []
    pos = 1
    while pos < len(data):
        length, pos = decode_varint(data, pos)
        items.append(deserialize_key(data[pos : pos + length]))
        pos += length
    return tuple(items)
