"""Unsigned LEB128 varints, used wherever a length prefixes bytes."""

from __future__ import annotations


def encode_varint(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"varints are unsigned, got {n}")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it); IndexError when `data` ends inside the varint."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    n = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
