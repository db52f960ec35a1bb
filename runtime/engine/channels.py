"""Channels between subtasks: bounded, so a slow consumer slows its producers.

An `InputChannel` is where one upstream subtask's elements arrive; the task
reads it without blocking. A `LocalChannel` connects a subtask to itself (or,
in the in-process runner, to a subtask in another thread) with no
serialization. Network channels (`network.py`) implement the same two sides.
"""

from __future__ import annotations

import collections
import itertools
import pickle
import threading
import time
from typing import Protocol

from lockgate.runtime.engine.events import Barrier, Element, OvertakingBarrier, Received


class InputChannel(Protocol):
    def poll(self) -> Received | None:
        """The next element (or a barrier that overtook some), or None when none is waiting."""
        ...


class OutputChannel(Protocol):
    blocked_s: float
    """Seconds `send` has waited for room so far: the backpressure its sender felt."""
    capacity: int
    """Frames the channel holds before `send` blocks (its credit)."""

    def send(self, element: Element) -> None:
        """Blocks while the channel is full (backpressure)."""
        ...

    def send_overtaking(self, barrier: Barrier, carried: Element | None) -> None:
        """Appends `carried` (the sender's last, partial frame: it goes beyond the
        credit) and puts `barrier` ahead of everything the channel still holds,
        never blocking. The receiver reads an `OvertakingBarrier` naming what it
        overtook (unaligned checkpoints)."""
        ...


class ChannelClosedError(ConnectionError):
    """The peer of a channel went away before the end of its stream."""


class ChannelSilentError(ChannelClosedError):
    """Nothing, not even a heartbeat, came from the peer of a channel for its liveness timeout."""


class TaskCancelledError(Exception):
    """The job is being torn down (another task failed, or it was cancelled)."""


class JobCancelledError(RuntimeError):
    """A run was cancelled from outside before it finished: its output is incomplete."""


# Frames of credit per channel (frames are `batch_size` records). What waits in
# channels is latency at saturation: with 16 frames a full pipeline held ~250 ms of
# records at p99; with 4 it holds ~70 ms at the same throughput (docs/benchmarks.md,
# "Latency against throughput").
DEFAULT_CHANNEL_CAPACITY = 4


class LocalChannel:
    """A bounded in-memory queue of elements, with a lane for overtaking barriers."""

    def __init__(
        self,
        capacity: int = DEFAULT_CHANNEL_CAPACITY,
        wakeup: threading.Event | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.capacity = capacity
        self._wakeup = wakeup
        self._cancelled = cancelled or threading.Event()
        self.blocked_s = 0.0
        self._room = threading.Condition()
        self._elements: collections.deque[Element] = collections.deque()
        self._credited = 0  # queued elements that count against the capacity
        self._uncredited: collections.deque[int] = collections.deque()  # their positions (sequence numbers)
        self._appended = 0  # elements ever queued: the next one's sequence number
        self._taken = 0  # elements ever polled
        self._overtaking: collections.deque[tuple[Barrier, int]] = collections.deque()

    def send(self, element: Element) -> None:
        with self._room:
            if self._credited >= self.capacity:
                self._wait_for_room()
            self._elements.append(element)
            self._credited += 1
            self._appended += 1
        if self._wakeup is not None:
            self._wakeup.set()

    def _wait_for_room(self) -> None:
        started = time.monotonic()
        try:
            while self._credited >= self.capacity:
                # Blocked by backpressure; a torn-down job must not keep us here.
                if self._cancelled.is_set():
                    raise TaskCancelledError
                self._room.wait(0.05)
        finally:
            self.blocked_s += time.monotonic() - started

    def send_overtaking(self, barrier: Barrier, carried: Element | None) -> None:
        with self._room:
            if carried is not None:
                self._uncredited.append(self._appended)
                self._elements.append(carried)
                self._appended += 1
            self._overtaking.append((barrier, self._appended))
        if self._wakeup is not None:
            self._wakeup.set()

    def poll(self) -> Received | None:
        with self._room:
            if self._overtaking:
                barrier, position = self._overtaking.popleft()
                ahead = itertools.islice(self._elements, position - self._taken)
                return OvertakingBarrier(
                    barrier, tuple(pickle.dumps(e, pickle.HIGHEST_PROTOCOL) for e in ahead)
                )
            if not self._elements:
                return None
            element = self._elements.popleft()
            if self._uncredited and self._uncredited[0] == self._taken:
                self._uncredited.popleft()
            else:
                self._credited -= 1
                self._room.notify()
            self._taken += 1
            return element

    def __len__(self) -> int:
        with self._room:
            return len(self._elements)
