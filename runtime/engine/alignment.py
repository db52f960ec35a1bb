"""Barrier alignment over the input channels of one subtask.

Exactly-once: a channel that delivered barrier n is blocked (its elements stay
queued, which backpressures its producer) until barrier n has arrived on every
channel; then the subtask snapshots, forwards the barrier and unblocks them.
At-least-once: channels are never blocked; the snapshot is taken when the last
barrier n arrives, so records after a fast channel's barrier may be replayed.

Unaligned (exactly-once with `unaligned_after_s`, FLIP-76): barriers overtake
what their channels hold (`OvertakingBarrier`). The gate starts aligned, reading
each channel up to its barrier's place in the stream; when the alignment has
lasted `unaligned_after_s` (0: at once) since the first barrier n arrived, it
takes checkpoint n there: the subtask snapshots and forwards the barrier at
once, every channel is unblocked, and what lies before barrier n on each
channel but was not read yet becomes the checkpoint's channel state: the
elements barrier n overtook, and on a channel whose barrier has not arrived,
whatever is read from it until it does. Once every barrier n arrived, the gate
yields the `ChannelState`, which the snapshot writes with the subtask's state;
a restore replays it before any new input. Savepoints and a checkpoint that
may be the job's final one (`Barrier.may_overtake`) are always aligned.

Event time: the gate's watermark is the least over its channels that have not
ended and are not idle; it is passed on when it rises, never when it would fall
(a channel that is active again after idleness catches up first). When every
live channel is idle the gate passes idleness on. A blocked channel's
watermarks wait in its queue with its records.
"""

from __future__ import annotations

import pickle
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from lockgate.runtime.engine.channels import InputChannel
from lockgate.runtime.engine.events import (
    NO_WATERMARK,
    Barrier,
    Element,
    EndOfStream,
    Idle,
    OvertakingBarrier,
    Received,
    TimestampedBatch,
    Watermark,
)

Mode = Literal["exactly-once", "at-least-once"]


@dataclass(frozen=True)
class ChannelState:
    """What lay before checkpoint n's barriers in the input channels and was not read
    when the subtask took checkpoint n unaligned: each element pickled, in the order
    of its channel (channels interleaved)."""

    checkpoint_id: int
    frames: tuple[bytes, ...]


@dataclass
class _Alignment:
    barrier: Barrier
    started: float = field(default_factory=time.monotonic)  # the first barrier's arrival
    arrived: set[int] = field(default_factory=set)
    ahead: dict[int, int] = field(default_factory=dict)  # per arrived channel: elements before its place
    overtaken: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    drained: bool = True  # every barrier that arrived is drained
    taken: bool = False  # the subtask took it unaligned: channel state is being gathered
    frames: list[bytes] = field(default_factory=list)

    def arrive(self, index: int, barrier: Barrier, overtaken: tuple[bytes, ...]) -> None:
        self.arrived.add(index)
        self.ahead[index] = len(overtaken)
        self.overtaken[index] = overtaken
        self.drained = self.drained and barrier.drained
        if self.taken:
            self.frames.extend(overtaken)

    def read(self, index: int, element: Element) -> None:
        """An element was read from channel `index`."""
        if index in self.arrived:
            if self.ahead[index]:
                self.ahead[index] -= 1
        elif self.taken and isinstance(element, (list, TimestampedBatch)):
            self.frames.append(pickle.dumps(element, pickle.HIGHEST_PROTOCOL))

    def take(self) -> Barrier:
        """Take the checkpoint now: what the arrived barriers overtook and was not read
        yet is channel state; the channels still without one record what they yield."""
        self.taken = True
        for index in self.arrived:
            overtaken = self.overtaken[index]
            self.frames.extend(overtaken[len(overtaken) - self.ahead[index] :])
            self.ahead[index] = 0
        return replace(self.barrier, drained=False)


class InputGate:
    """Reads the channels of one subtask round robin, honouring alignment."""

    def __init__(
        self,
        channels: Sequence[InputChannel],
        mode: Mode = "exactly-once",
        *,
        unaligned_after_s: float | None = None,
        replay: Sequence[Element] = (),
    ) -> None:
        self._channels = list(channels)
        self._mode = mode
        self._unaligned_after_s = unaligned_after_s if mode == "exactly-once" else None
        self._replay = deque(replay)  # a restored checkpoint's channel state, read first
        self._ended: set[int] = set()
        self._aligning: dict[int, _Alignment] = {}  # by checkpoint id, oldest first
        self._next = 0
        self._watermarks = [NO_WATERMARK] * len(self._channels)
        self._idle: set[int] = set()
        self._watermark = NO_WATERMARK  # the last one passed on
        self._passed_idle = False
        self._pending: list[Idle] = []  # idleness that follows a watermark just passed on
        self.last_alignment_s = 0.0
        """From the first to the last barrier of the most recently aligned checkpoint
        (to the moment it was taken, if unaligned)."""
        self.unaligned_taken = 0
        """Checkpoints this gate took unaligned."""
        # After a stop checkpoint taken unaligned, whatever is still to read up to the end
        # of the streams lies before its barriers: in its channel state, replayed by the
        # next launch. Reading it here would only delay the stop.
        self._discarding = False

    @property
    def finished(self) -> bool:
        return len(self._ended) == len(self._channels)

    def _aligning_now(self) -> _Alignment | None:
        """The oldest checkpoint whose barrier the subtask has not passed on yet."""
        return next((a for _, a in sorted(self._aligning.items()) if not a.taken), None)

    def _blocked(self, index: int) -> bool:
        if self._mode != "exactly-once" or (alignment := self._aligning_now()) is None:
            return False
        return index in alignment.arrived and not alignment.ahead[index]

    def poll(self) -> list[object] | TimestampedBatch | Barrier | Watermark | Idle | ChannelState | None:
        """A batch of records, a barrier whose alignment just completed (or that the
        gate took unaligned), a risen watermark or idleness, the channel state of a
        checkpoint taken unaligned, or None when nothing can be read now.
        `finished` tells when every channel has ended."""
        if self._replay:
            return self._replay.popleft()  # type: ignore[return-value]
        while True:
            if (ready := self._complete_alignments()) is not None:
                return ready
            if self._pending:
                return self._pending.pop(0)
            received, index = self._next_element()
            if received is None:
                return None
            if isinstance(received, OvertakingBarrier):
                self._arrive(index, received.barrier, received.overtaken)
                continue
            element = received
            if self._aligning:
                for alignment in self._aligning.values():
                    alignment.read(index, element)
            if isinstance(element, (list, TimestampedBatch)):
                if self._discarding:
                    continue
                self._idle.discard(index)
                self._passed_idle = False
                return element
            if isinstance(element, Barrier):
                self._arrive(index, element, ())
            elif (mark := self._signal(index, element)) is not None:
                return mark

    def _signal(self, index: int, signal: EndOfStream | Watermark | Idle) -> Watermark | Idle | None:
        """The end of channel `index`, or its event time, read: what to pass on, if anything."""
        if isinstance(signal, EndOfStream):
            self._ended.add(index)
        elif isinstance(signal, Watermark):
            self._watermarks[index] = max(self._watermarks[index], signal.timestamp)
            self._idle.discard(index)
        else:
            self._idle.add(index)
        return self._event_time()

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

    def _arrive(self, index: int, barrier: Barrier, overtaken: tuple[bytes, ...]) -> None:
        alignment = self._aligning.get(barrier.checkpoint_id)
        if alignment is None:
            alignment = self._aligning[barrier.checkpoint_id] = _Alignment(barrier)
        alignment.arrive(index, barrier, overtaken)

    def _next_element(self) -> tuple[Received | None, int]:
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

    def _complete_alignments(self) -> Barrier | ChannelState | None:
        """The oldest checkpoint whose barrier is in, at its place, from every live
        channel, or whose alignment lasted long enough to take it unaligned; or the
        channel state of one taken unaligned whose barriers are now all in."""
        if not self._aligning:
            return None
        live = set(range(len(self._channels))) - self._ended
        for checkpoint_id, taken in sorted(self._aligning.items()):
            if taken.taken and live <= taken.arrived:
                del self._aligning[checkpoint_id]
                self._discarding = self._discarding or taken.barrier.trigger.stop
                return ChannelState(checkpoint_id, tuple(taken.frames))
        if (alignment := self._aligning_now()) is None:
            return None
        waited = time.monotonic() - alignment.started
        if live <= alignment.arrived and not any(alignment.ahead[i] for i in live):
            del self._aligning[alignment.barrier.checkpoint_id]
            self.last_alignment_s = waited
            return replace(alignment.barrier, drained=alignment.drained)
        after = self._unaligned_after_s
        # Whether it may go unaligned is the first barrier's to say: one from a source
        # that had not drained its input means the checkpoint cannot be the final one.
        if after is not None and waited >= after and alignment.barrier.may_overtake:
            self.last_alignment_s = waited
            self.unaligned_taken += 1
            return alignment.take()
        return None

    def gathering(self, checkpoint_id: int) -> bool:
        """Whether the gate took checkpoint `checkpoint_id` unaligned and its channel
        state is still to come (a `ChannelState` that `poll` yields later)."""
        alignment = self._aligning.get(checkpoint_id)
        return alignment is not None and alignment.taken

    @property
    def blocked_channels(self) -> int:
        return sum(1 for i in range(len(self._channels)) if self._blocked(i))
