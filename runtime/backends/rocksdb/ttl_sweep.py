"""The TTL sweep of the RocksDB backend: a column family in key order (see state.ttl_cleanup)."""

from __future__ import annotations

from collections.abc import Callable

import rocksdict
from lockgate.runtime.state.ttl_cleanup import SweepStep


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
