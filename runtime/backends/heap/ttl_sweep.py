"""The TTL sweep of the heap backend: its dicts, a key group at a time (see state.ttl_cleanup)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockgate.runtime.state.ttl_cleanup import SweepStep


class KeyGroupsSweep:
    """The heap's dicts, a key group at a time. `alive` maps a stored object to
    what stays (None: nothing). For map state a row is a dict of map entries,
    and each entry counts as examined."""

    def __init__(
        self, groups: dict[int, dict[bytes, Any]], alive: Callable[[Any, int], Any], is_map: bool
    ) -> None:
        self._groups = groups
        self._alive = alive
        self._sweep = self._sweep_map if is_map else self._sweep_value
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
            seen, gone = self._sweep(rows, key, now_ms)
            examined += seen
            dropped += gone
        # The end of the pass (no listed keys, and the groups still to list are empty) is
        # told now, not by the next step, so that a pass ending on the budget does not
        # cost this state its next turn.
        wrapped = not self._keys and not any(self._groups[g] for g in self._order[self._position :])
        if wrapped:
            self._position = 0
        return SweepStep(examined, dropped, wrapped)

    def _sweep_value(self, rows: dict[bytes, Any], key: bytes, now_ms: int) -> tuple[int, int]:
        kept = self._alive(rows[key], now_ms)
        if kept is None:
            del rows[key]
            return 1, 1
        rows[key] = kept
        return 1, 0

    def _sweep_map(self, rows: dict[bytes, Any], key: bytes, now_ms: int) -> tuple[int, int]:
        entries: dict[bytes, Any] = rows[key]
        expired = [map_key for map_key, stored in entries.items() if self._alive(stored, now_ms) is None]
        for map_key in expired:
            del entries[map_key]
        if not entries:
            del rows[key]
        return len(entries) + len(expired), len(expired)
