"""How many records go into one frame of a keyed exchange (Flink's buffer debloating
and buffer timeout, as one rule).

A record waits twice on its way to the next subtask: in its sender's buffer,
until the frame it is in is full, and in the channel, behind the frames of
credit (`capacity`) before it. Both waits are a frame's worth of records over
the rate at which that channel's records go out, which is the receiver's rate
while it is the bottleneck (the sender is then blocked on credit) and the
sender's own otherwise. So each channel's frames hold `target_s / capacity` of
its measured rate: frames stay full (`max_frame`) at speed, where per-frame
costs matter, and shrink behind a slow receiver (an expensive operator) or on
a channel that gets few records (a key range that is quiet), where a full
frame would hold records for seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lockgate.runtime.engine.channels import OutputChannel

# What a record may wait in a keyed exchange (buffer and channel), by default.
DEFAULT_IN_FLIGHT_TARGET_S = 0.05
# Below this, per-frame costs (a pickle, a MAC, a syscall) outweigh what it saves.
MIN_FRAME = 8
# How often the size is reconsidered, and how much of the new estimate it takes.
WINDOW_S = 0.1
SMOOTHING = 0.5


class FrameSizer:
    """The frame size of one output channel; `size` is read before each frame is cut."""

    def __init__(
        self,
        channel: OutputChannel,
        max_frame: int,
        target_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = max_frame
        self._channel = channel
        self._max = max_frame
        self._min = min(MIN_FRAME, max_frame)
        self._target_s = target_s
        self._clock = clock
        self._window_start = clock()
        self._records = 0
        self._filling_since: float | None = None  # first seen holding records, unsent

    def overdue(self) -> bool:
        """Whether the frame being filled has waited its share of the target
        (`target_s / capacity`) and goes out unfilled: on a channel that gets few
        records, a full frame would hold them for long."""
        if self._target_s is None:
            return False
        now = self._clock()
        if self._filling_since is None:
            self._filling_since = now
            return False
        return now - self._filling_since >= self._target_s / max(1, self._channel.capacity)

    def sent(self, records: int) -> None:
        """`records` went out in one frame."""
        if self._target_s is None:
            return
        self._filling_since = None
        self._records += records
        now = self._clock()
        elapsed = now - self._window_start
        if elapsed >= WINDOW_S:
            ideal = self._records / elapsed * self._target_s / max(1, self._channel.capacity)
            wanted = SMOOTHING * ideal + (1 - SMOOTHING) * self.size
            self.size = max(self._min, min(self._max, round(wanted)))
            self._window_start, self._records = now, 0
