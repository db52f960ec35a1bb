"""Channels between subtasks: bounded, so a slow consumer slows its producers.

An `InputChannel` is where one upstream subtask's elements arrive; the task
reads it without blocking. A `LocalChannel` connects a subtask to itself (or,
in the in-process runner, to a subtask in another thread) with no
serialization. Network channels (`network.py`) implement the same two sides.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Protocol

from lockgate.runtime.engine.events import Element


class InputChannel(Protocol):
    def poll(self) -> Element | None:
        """The next element, or None when none is waiting."""
        ...


class OutputChannel(Protocol):
    blocked_s: float
    """Seconds `send` has waited for room so far: the backpressure its sender felt."""
    capacity: int
    """Frames the channel holds before `send` blocks (its credit)."""

    def send(self, element: Element) -> None:
        """Blocks while the channel is full (backpressure)."""
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
    """A bounded in-memory queue of elements."""

    def __init__(
        self,
        capacity: int = DEFAULT_CHANNEL_CAPACITY,
        wakeup: threading.Event | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self._queue: queue.Queue[Element] = queue.Queue(capacity)
        self.capacity = capacity
        self._wakeup = wakeup
        self._cancelled = cancelled or threading.Event()
        self.blocked_s = 0.0

    def send(self, element: Element) -> None:
        try:
            self._queue.put_nowait(element)
        except queue.Full:
            self._send_blocked(element)
        if self._wakeup is not None:
            self._wakeup.set()

    def _send_blocked(self, element: Element) -> None:
        started = time.monotonic()
        try:
            while True:
                try:
                    self._queue.put(element, timeout=0.05)
                    return
                except queue.Full:
                    # Blocked by backpressure; a torn-down job must not keep us here.
                    if self._cancelled.is_set():
                        raise TaskCancelledError from None
        finally:
            self.blocked_s += time.monotonic() - started

    def poll(self) -> Element | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def __len__(self) -> int:
        return self._queue.qsize()
