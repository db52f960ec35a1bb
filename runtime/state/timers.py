"""Timers as keyed state: each operator keeps one queue per time domain, stored
by key group like every other state, so checkpoints, savepoints and restores at
another parallelism carry them (Flink keeps its timers in the state backend for
the same reason).

A timer is (key group, timestamp, key). Within a key group its stored `rest` is
the timestamp as 8 bytes that sort in time order (the signed value offset by
2**63, big endian), then the serialized key, with no value: RocksDB orders the
rows by (key group, timestamp, key), so the earliest timers of a group are found
with one seek, as in Flink's RocksDB timer column family. Registering a timer
that exists is a no-op: one timer per key and timestamp fires once.
"""

from __future__ import annotations

from typing import Protocol

_OFFSET = 1 << 63
TIMESTAMP_BYTES = 8
# How many due timers one `pop_due` hands out: firing can add timers, and the
# final watermark of a bounded job makes every timer due at once.
POP_BATCH = 4096


def check_timestamp(timestamp: int) -> None:
    """Every stored timer must encode: one that cannot would fail every snapshot."""
    if not -_OFFSET <= timestamp < _OFFSET:
        raise ValueError(f"a timer's timestamp must fit in 64 signed bits, got {timestamp}")


def encode_timestamp(timestamp: int) -> bytes:
    check_timestamp(timestamp)
    return (timestamp + _OFFSET).to_bytes(TIMESTAMP_BYTES, "big")


def decode_timestamp(data: bytes) -> int:
    return int.from_bytes(data[:TIMESTAMP_BYTES], "big") - _OFFSET


def timer_rest(timestamp: int, key_bytes: bytes) -> bytes:
    return encode_timestamp(timestamp) + key_bytes


def split_timer_rest(rest: bytes) -> tuple[int, bytes]:
    """Inverse of `timer_rest`: (timestamp, key bytes)."""
    return decode_timestamp(rest), rest[TIMESTAMP_BYTES:]


DueTimer = tuple[int, int, bytes]
"""(timestamp, key group, key bytes)"""


class TimerQueue(Protocol):
    """The timers of one operator and time domain, in the key groups it owns."""

    def add(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        """Register a timer; one that is registered already stays one."""
        ...

    def remove(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        """Delete a timer; deleting one that does not exist is no error."""
        ...

    def earliest(self) -> int | None:
        """The earliest timestamp of any timer, or None when there is none."""
        ...

    def pop_due(self, up_to: int, limit: int = POP_BATCH) -> list[DueTimer]:
        """Remove and return up to `limit` timers with timestamp <= `up_to`; each key's
        in time order (a backend may hand them out key group by key group)."""
        ...
