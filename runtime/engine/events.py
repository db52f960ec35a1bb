"""What travels in a channel besides records: barriers and the end of the stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.runtime.coordination.records import Trigger


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


Element = list[Any] | Barrier | EndOfStream
"""A batch of records, a barrier, or the end of stream."""
