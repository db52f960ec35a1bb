"""What travels in a channel: batches of records (with their event times when the
job has them), barriers, watermarks, idleness and the end of the stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.runtime.coordination.records import Trigger

# Event time before any watermark, and the watermark of input that has ended.
NO_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1


@dataclass(frozen=True)
class Barrier:
    """Checkpoint barrier n: everything before it belongs to checkpoint n."""

    trigger: Trigger

    @property
    def checkpoint_id(self) -> int:
        return self.trigger.checkpoint_id


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


EventTime = Watermark | Idle
Element = list[Any] | TimestampedBatch | Barrier | Watermark | Idle | EndOfStream
"""A batch of records, a barrier, a watermark or idleness, or the end of stream."""
