"""Incremental cleanup of expired TTL entries, as Flink's `cleanupIncrementally`.

Reads delete an expired entry they find, but an entry nobody reads again would
stay: in the heap's dicts, in RocksDB, and in every native incremental
checkpoint after it. Flink removes those from RocksDB with a compaction filter,
which rocksdict does not expose. Instead each snapshot first examines a bounded
number of stored entries, continuing where the last one stopped, and deletes
the expired ones (a list keeps its live elements); RocksDB's compactions then
reclaim their bytes as for any delete.

This module schedules the sweeps; each backend's package has its own (the
RocksDB backend walks a column family, the heap backend its dicts).

The budget adapts: when a call used all of it and more than half of the
entries it examined had expired, the backlog is growing and the next budget
doubles (up to `MAX_BUDGET`); when fewer than a quarter had expired, or the
pass ended well within it, it halves back towards `DEFAULT_BUDGET`. So expired
entries stay a bounded share of what is stored, whatever the rate of new keys,
and a quiet job pays for `DEFAULT_BUDGET` entries per checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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
        if budget is None:  # adapt it, as the module docstring says
            if examined >= self.budget and dropped * 2 > examined:
                self.budget = min(MAX_BUDGET, self.budget * 2)
            elif dropped * 4 < examined or examined * 2 < self.budget:
                self.budget = max(DEFAULT_BUDGET, self.budget // 2)
        return dropped
