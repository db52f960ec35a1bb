"""Barrier alignment over the input channels of one subtask.

Exactly-once: a channel that delivered barrier n is blocked (its elements stay
queued, which backpressures its producer) until barrier n has arrived on every
channel; then the subtask snapshots, forwards the barrier and unblocks them.
At-least-once: channels are never blocked; the snapshot is taken when the last
barrier n arrives, so records after a fast channel's barrier may be replayed.

Event time: the gate's watermark is the least over its channels that have not
ended and are not idle; it is passed on when it rises, never when it would fall
(a channel that is active again after idleness catches up first). When every
live channel is idle the gate passes idleness on. A blocked channel's
watermarks wait in its queue with its records.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lockgate.runtime.engine.channels import InputChannel
from lockgate.runtime.engine.events import (
    NO_WATERMARK,
    Barrier,
    Element,
    EndOfStream,
    Idle,
    TimestampedBatch,
    Watermark,
)

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
        self._watermarks = [NO_WATERMARK] * len(self._channels)
        self._idle: set[int] = set()
        self._watermark = NO_WATERMARK  # the last one passed on
        self._passed_idle = False
        self._pending: list[Idle] = []  # idleness that follows a watermark just passed on
        self.last_alignment_s = 0.0
        """From the first to the last barrier of the most recently aligned checkpoint."""

    @property
    def finished(self) -> bool:
        return len(self._ended) == len(self._channels)

    def _blocked(self, index: int) -> bool:
        if self._mode != "exactly-once" or not self._aligning:
            return False
        return index in self._aligning[min(self._aligning)].arrived

    def poll(self) -> list[object] | TimestampedBatch | Barrier | Watermark | Idle | None:
        """A batch of records, a barrier whose alignment just completed, a risen
        watermark or idleness, or None when nothing can be read now. `finished`
        tells when every channel has ended."""
        while True:
            if (ready := self._complete_alignments()) is not None:
                return ready
            if self._pending:
                return self._pending.pop(0)
            element, index = self._next_element()
            if element is None:
                return None
            if isinstance(element, (list, TimestampedBatch)):
                self._idle.discard(index)
                self._passed_idle = False
                return element
            if isinstance(element, Barrier):
                self._aligning.setdefault(element.checkpoint_id, _Alignment(element)).arrived.add(index)
                continue
            if isinstance(element, EndOfStream):
                self._ended.add(index)
            elif isinstance(element, Watermark):
                self._watermarks[index] = max(self._watermarks[index], element.timestamp)
                self._idle.discard(index)
            else:
                self._idle.add(index)
            if (mark := self._event_time()) is not None:
                return mark

    def _event_time(self) -> Watermark | Idle | None:
        """What the gate passes on after a channel's event time changed, if anything.
        When the last active channel turns idle, the highest watermark any channel
        reached goes first (nothing holds it back any more), then idleness."""
        live = [i for i in range(len(self._channels)) if i not in self._ended]
        active = [i for i in live if i not in self._idle]
        if live and not active:
            if self._passed_idle:
                return None
            self._passed_idle = True
            highest = max(self._watermarks[i] for i in live)
            if highest > self._watermark:
                self._watermark = highest
                self._pending.append(Idle())
                return Watermark(highest)
            return Idle()
        if not active:
            return None  # every channel ended: their last watermarks were passed on already
        watermark = min(self._watermarks[i] for i in active)
        if watermark <= self._watermark:
            return None
        self._watermark = watermark
        self._passed_idle = False
        return Watermark(watermark)

    def _next_element(self) -> tuple[Element | None, int]:
        """Round robin over the channels that are neither ended nor blocked."""
        count = len(self._channels)
        for step in range(count):
            index = (self._next + step) % count
            if index in self._ended or self._blocked(index):
                continue
            if (element := self._channels[index].poll()) is not None:
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
