"""What travels in a channel: batches of records (with their event times when the
job has them), barriers, watermarks, idleness and the end of the stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes

# Event time before any watermark, and the watermark of input that has ended.
NO_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1


@dataclass(frozen=True)
class Barrier:
    """Checkpoint barrier n: everything before it belongs to checkpoint n.

    `drained`: every source behind it had read all its input when it was made, so
    checkpoint n may be the job's final one, whose sinks' epoch must hold every
    record: such a barrier is always aligned, never overtakes records."""

    trigger: Trigger
    drained: bool = False

    @property
    def checkpoint_id(self) -> int:
        return self.trigger.checkpoint_id

    @property
    def may_overtake(self) -> bool:
        """Whether a gate may take this checkpoint unaligned: savepoints and a
        possibly final checkpoint stay aligned."""
        return self.trigger.kind == "checkpoint" and not self.drained


@dataclass(frozen=True)
class OvertakingBarrier:
    """A barrier sent ahead of what its channel still held (unaligned checkpoints),
    as the receiving side reads it: `overtaken` are the elements that precede it in
    the stream but are still queued behind it, each pickled as it was then. They
    are still read, after it; a gate that takes the checkpoint before reading them
    keeps them as the checkpoint's channel state."""

    barrier: Barrier
    overtaken: tuple[bytes, ...]


@dataclass(frozen=True)
class EndOfStream:
    """The upstream subtask will send nothing more."""


@dataclass(frozen=True)
class Watermark:
    """Event time has reached `timestamp`: no record at or before it is to come
    from this upstream subtask (a later one is late)."""

    timestamp: int


@dataclass(frozen=True)
class Idle:
    """The upstream subtask's sources have read nothing for their idleness timeout:
    it holds no watermark back until it sends a record or a watermark again."""


@dataclass(frozen=True)
class TimestampedBatch:
    """A batch whose records carry event time: `timestamps[i]` is `records[i]`'s
    (None for a record that has none)."""

    records: list[Any]
    timestamps: list[int | None]


KeyedRecord = tuple[Any, bytes, int, Any]
"""A record on its way into a keyed operator: `(key, key bytes, key group, value)`.
The exchange serialized and hashed the key to route the record; the operator
uses both as they came instead of computing them again."""


def keyed_record(key: Any, value: Any, max_parallelism: int) -> KeyedRecord:
    """`value` under `key` as the exchange sends it (which builds it inline)."""
    key_bytes = serialize_key(key)
    return key, key_bytes, key_group_of_bytes(key_bytes, max_parallelism), value


EventTime = Watermark | Idle
Element = list[Any] | TimestampedBatch | Barrier | Watermark | Idle | EndOfStream
"""A batch of records, a barrier, a watermark or idleness, or the end of stream."""
Received = Element | OvertakingBarrier
"""What an input channel yields: an element, or a barrier that overtook some."""
