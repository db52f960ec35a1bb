"""Barrier alignment over the input channels of one subtask.

Exactly-once: a channel that delivered barrier n is blocked (its elements stay
queued, which backpressures its producer) until barrier n has arrived on every
channel; then the subtask snapshots, forwards the barrier and unblocks them.
At-least-once: channels are never blocked; the snapshot is taken when the last
barrier n arrives, so records after a fast channel's barrier may be replayed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lockgate.runtime.engine.channels import InputChannel
from lockgate.runtime.engine.events import Barrier, Element, EndOfStream

Mode = Literal["exactly-once", "at-least-once"]


@dataclass
class _Alignment:
    barrier: Barrier
    arrived: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)  # the first barrier's arrival


class InputGate:
    """Reads the channels of one subtask round robin, honouring alignment."""

    def __init__(self, channels: Sequence[InputChannel], mode: Mode = "exactly-once") -> None:
        self._channels = list(channels)
        self._mode = mode
        self._ended: set[int] = set()
        self._aligning: dict[int, _Alignment] = {}  # by checkpoint id, oldest first
        self._next = 0
        self.last_alignment_s = 0.0
        """From the first to the last barrier of the most recently aligned checkpoint."""

    @property
    def finished(self) -> bool:
        return len(self._ended) == len(self._channels)

    def _blocked(self, index: int) -> bool:
        if self._mode != "exactly-once" or not self._aligning:
            return False
        oldest = self._aligning[min(self._aligning)]
        return index in oldest.arrived

    def poll(self) -> list[object] | Barrier | None:
        """A batch of records, a barrier whose alignment just completed, or None when
        nothing can be read now. `finished` tells when every channel has ended."""
        while True:
            ready = self._complete_alignments()
            if ready is not None:
                return ready
            element, index = self._next_element()
            if element is None:
                return None
            if isinstance(element, list):
                return element
            if isinstance(element, EndOfStream):
                self._ended.add(index)
            else:
                alignment = self._aligning.setdefault(element.checkpoint_id, _Alignment(element))
                alignment.arrived.add(index)

    def _next_element(self) -> tuple[Element | None, int]:
        """Round robin over the channels that are neither ended nor blocked."""
        count = len(self._channels)
        for step in range(count):
            index = (self._next + step) % count
            if index in self._ended or self._blocked(index):
                continue
            element = self._channels[index].poll()
            if element is not None:
                self._next = (index + 1) % count
                return element, index
        return None, -1

    def _complete_alignments(self) -> Barrier | None:
        """The oldest checkpoint whose barrier is in from every live channel."""
        if not self._aligning:
            return None
        oldest = min(self._aligning)
        alignment = self._aligning[oldest]
        live = set(range(len(self._channels))) - self._ended
        if live <= alignment.arrived:
            del self._aligning[oldest]
            self.last_alignment_s = time.monotonic() - alignment.started
            return alignment.barrier
        return None

    @property
    def blocked_channels(self) -> int:
        return sum(1 for i in range(len(self._channels)) if self._blocked(i))
