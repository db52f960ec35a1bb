"""Heap timers: a set per key group (what exists) and one priority queue over all
of them (what fires next). Deleting leaves the queue entry behind, skipped when it
comes up; the queue is rebuilt once such leftovers outnumber the live timers."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from lockgate.runtime.state.tables import FrozenGroups, FrozenTable
from lockgate.runtime.state.timers import POP_BATCH, DueTimer, check_timestamp, split_timer_rest, timer_rest


class HeapTimerQueue:
    def __init__(self, key_groups: range) -> None:
        self._groups: dict[int, set[tuple[int, bytes]]] = {group: set() for group in key_groups}
        self._queue: list[tuple[int, bytes, int]] = []  # (timestamp, key bytes, key group)
        self._live = 0

    def add(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        check_timestamp(timestamp)
        timers = self._groups[key_group]
        timer = (timestamp, key_bytes)
        if timer not in timers:
            timers.add(timer)
            self._live += 1
            heapq.heappush(self._queue, (timestamp, key_bytes, key_group))

    def remove(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        timers = self._groups[key_group]
        if (timestamp, key_bytes) in timers:
            timers.discard((timestamp, key_bytes))
            self._live -= 1
            if len(self._queue) > 2 * self._live + 64:
                self._rebuild()

    def _rebuild(self) -> None:
        self._queue = [(ts, key, group) for group, timers in self._groups.items() for ts, key in timers]
        heapq.heapify(self._queue)

    def _skip_deleted(self) -> None:
        queue = self._queue
        while queue and (queue[0][0], queue[0][1]) not in self._groups[queue[0][2]]:
            heapq.heappop(queue)

    def earliest(self) -> int | None:
        self._skip_deleted()
        return self._queue[0][0] if self._queue else None

    def pop_due(self, up_to: int, limit: int = POP_BATCH) -> list[DueTimer]:
        due: list[DueTimer] = []
        queue = self._queue
        while len(due) < limit:
            self._skip_deleted()
            if not queue or queue[0][0] > up_to:
                break
            timestamp, key_bytes, group = heapq.heappop(queue)
            self._groups[group].discard((timestamp, key_bytes))
            self._live -= 1
            due.append((timestamp, group, key_bytes))
        return due

    def __len__(self) -> int:
        return self._live

    def freeze(self) -> FrozenTable:
        # A copy of each set: C-speed, as the synchronous part of a snapshot must be.
        copies = {group: list(timers) for group, timers in self._groups.items() if timers}
        return FrozenGroups(copies, lambda timers: ((timer_rest(ts, key), b"") for ts, key in timers))

    def load(self, key_group: int, entries: Iterable[tuple[bytes, bytes]]) -> None:
        for rest, _ in entries:
            timestamp, key_bytes = split_timer_rest(rest)
            self.add(key_group, timestamp, key_bytes)
