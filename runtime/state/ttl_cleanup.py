"""Incremental cleanup of expired TTL entries, as Flink's `cleanupIncrementally`.

Reads delete an expired entry they find, but an entry nobody reads again would
stay: in the heap's dicts, in RocksDB, and in every native incremental
checkpoint after it. Flink removes those from RocksDB with a compaction filter,
which rocksdict does not expose. Instead each snapshot first examines a bounded
number of stored entries, continuing where the last one stopped, and deletes
the expired ones (a list keeps its live elements); RocksDB's compactions then
reclaim their bytes as for any delete.

The budget adapts: when a call used all of it and more than half of the
entries it examined had expired, the backlog is growing and the next budget
doubles (up to `MAX_BUDGET`); when fewer than a quarter had expired, or the
pass ended well within it, it halves back towards `DEFAULT_BUDGET`. So expired
entries stay a bounded share of what is stored, whatever the rate of new keys,
and a quiet job pays for `DEFAULT_BUDGET` entries per checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import rocksdict

# Entries examined per checkpoint and subtask, at least and at most; see
# docs/benchmarks.md for what they cost the checkpoint's synchronous part.
DEFAULT_BUDGET = 10_000
MAX_BUDGET = 640_000


@dataclass(frozen=True)
class SweepStep:
    examined: int
    dropped: int
    wrapped: bool
    """The end of the table was reached; the next step starts a new pass."""


class Sweep(Protocol):
    def step(self, budget: int, now_ms: int) -> SweepStep: ...


class IncrementalCleanup:
    """Round robin over the TTL states of one backend."""

    def __init__(self) -> None:
        self._sweeps: list[Sweep] = []
        self._next = 0
        self.budget = DEFAULT_BUDGET

    def add(self, sweep: Sweep) -> None:
        self._sweeps.append(sweep)

    def run(self, budget: int | None, now_ms: int) -> int:
        """Examine up to `budget` entries (None: the adaptive budget, which this
        call then adapts); the number of entries deleted."""
        limit = self.budget if budget is None else budget
        examined = dropped = 0
        # Each state at most once per call, so an all-empty backend returns at once.
        for _ in range(len(self._sweeps)):
            if examined >= limit:
                break
            step = self._sweeps[self._next].step(limit - examined, now_ms)
            examined += step.examined
            dropped += step.dropped
            if step.wrapped:
                self._next = (self._next + 1) % len(self._sweeps)
        if budget is None:
            self._adapt(examined, dropped)
        return dropped

    def _adapt(self, examined: int, dropped: int) -> None:
        if examined >= self.budget and dropped * 2 > examined:
            self.budget = min(MAX_BUDGET, self.budget * 2)
        elif dropped * 4 < examined or examined * 2 < self.budget:
            self.budget = max(DEFAULT_BUDGET, self.budget // 2)


class ColumnFamilySweep:
    """One RocksDB column family, in key order, resuming after the last key seen.
    `compact` maps stored bytes to what stays (None: nothing)."""

    def __init__(self, cf: rocksdict.Rdict, compact: Callable[[bytes, int], bytes | None]) -> None:
        self._cf = cf
        self._compact = compact
        self._after: bytes | None = None

    def step(self, budget: int, now_ms: int) -> SweepStep:
        rows = self._cf.iter()
        if self._after is None:
            rows.seek_to_first()
        else:
            rows.seek(self._after)
            if rows.valid() and rows.key() == self._after:
                rows.next()
        examined = dropped = 0
        # An iterator reads a consistent view, so writing behind it is safe.
        while examined < budget and rows.valid():
            row, data = rows.key(), rows.value()
            kept = self._compact(data, now_ms)
            if kept is None:
                self._cf.delete(row)
                dropped += 1
            elif kept is not data:
                self._cf.put(row, kept)
            examined += 1
            self._after = row
            rows.next()
        wrapped = not rows.valid()
        if wrapped:
            self._after = None
        return SweepStep(examined, dropped, wrapped)


class KeyGroupsSweep:
    """The heap's dicts, a key group at a time. `alive` maps a stored object to
    what stays (None: nothing). For map state a row is a dict of map entries,
    and each entry counts as examined."""

    def __init__(
        self, groups: dict[int, dict[bytes, Any]], alive: Callable[[Any, int], Any], is_map: bool
    ) -> None:
        self._groups = groups
        self._alive = alive
        self._is_map = is_map
        self._order = sorted(groups)
        self._position = 0  # index into _order of the group being swept
        self._keys: list[bytes] = []  # keys of that group not yet examined this pass

    def step(self, budget: int, now_ms: int) -> SweepStep:
        examined = dropped = 0
        while examined < budget:
            if not self._keys:
                if self._position == len(self._order):
                    break
                self._keys = list(self._groups[self._order[self._position]])
                self._position += 1
                continue
            rows = self._groups[self._order[self._position - 1]]
            key = self._keys.pop()
            if key not in rows:
                continue  # deleted since the group's keys were listed
            if self._is_map:
                seen, gone = self._sweep_map(rows, key, now_ms)
            else:
                seen, gone = 1, self._sweep_value(rows, key, now_ms)
            examined += seen
            dropped += gone
        # Told now, not by the next step, so that a pass ending on the budget
        # does not cost this state its next turn.
        wrapped = self._at_end()
        if wrapped:
            self._position = 0
        return SweepStep(examined, dropped, wrapped)

    def _at_end(self) -> bool:
        """Nothing left in this pass: no listed keys, and the groups still to list are empty."""
        return not self._keys and not any(self._groups[g] for g in self._order[self._position :])

    def _sweep_value(self, rows: dict[bytes, Any], key: bytes, now_ms: int) -> int:
        kept = self._alive(rows[key], now_ms)
        if kept is None:
            del rows[key]
            return 1
        rows[key] = kept
        return 0

    def _sweep_map(self, rows: dict[bytes, Any], key: bytes, now_ms: int) -> tuple[int, int]:
        entries: dict[bytes, Any] = rows[key]
        expired = [map_key for map_key, stored in entries.items() if self._alive(stored, now_ms) is None]
        for map_key in expired:
            del entries[map_key]
        if not entries:
            del rows[key]
        return len(entries) + len(expired), len(expired)
