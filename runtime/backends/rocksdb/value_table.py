"""Value-like state of the RocksDB backend: one row per key, behind a write-back cache.

Every call into rocksdict releases and retakes the GIL; with a source thread
beside the keyed one that costs more than RocksDB's own lookup, and it was
about half of a keyed operator's time. So the table keeps, in Python dicts of
*encoded* rows, the rows written since the last flush and the rows read from
the column family. A read or write of a hot key never leaves Python; a key
written many times between checkpoints reaches RocksDB once.

What the cache holds is bytes, as RocksDB would: `value()` still returns a new
object on every call, and changing it does not change the state until
`update()`, exactly as without the cache. Each of the two dicts is bounded
(`CACHE_BYTES`, counted as row plus value lengths): a table whose written rows
reach it flushes them; one whose read rows reach it forgets them all.

The backend flushes before anything reads the column family past the table
(the synchronous part of a snapshot, the TTL sweep) and makes the table forget
what it read before anything writes past it (a restore, a TTL sweep, dropping
foreign key groups). Rows written and not flushed are lost with the process,
as RocksDB's memtable is without a WAL: durability comes from checkpoints.
"""

from __future__ import annotations

from typing import Any

import rocksdict
from lockgate.runtime.state.codecs import Codec, codec_for
from lockgate.runtime.state.descriptors import StateDescriptor
from lockgate.runtime.state.tables import MISSING, CurrentKey

# Per table and per dict (written, read). 32 MiB of small rows is ~400,000 keys.
CACHE_BYTES = 32 * 1024 * 1024

# Not in a dict: distinct from None, which caches "no such row".
_UNCACHED: Any = object()


class RocksDBValueTable:
    def __init__(
        self, descriptor: StateDescriptor, cf: rocksdict.Rdict, *, cache_bytes: int = CACHE_BYTES
    ) -> None:
        self.descriptor = descriptor
        self.codec: Codec = codec_for(descriptor)
        self._cf = cf
        self._loads = self.codec.loads
        self._dumps = self.codec.dumps
        self._cache_bytes = cache_bytes
        # Rows written since the last flush; None: deleted.
        self._written: dict[bytes, bytes | None] = {}
        self._written_bytes = 0
        # Rows as the column family holds them; None: no such row.
        self._read: dict[bytes, bytes | None] = {}
        self._read_bytes = 0

    def get(self, current: CurrentKey) -> Any:
        row = current.db_prefix
        data = self._written.get(row, _UNCACHED)
        if data is _UNCACHED:
            data = self._read.get(row, _UNCACHED)
            if data is _UNCACHED:
                data = self._cf.get(row)
                self._remember(row, data)
        return MISSING if data is None else self._loads(data)

    def put(self, current: CurrentKey, stored: Any) -> None:
        self._write(current.db_prefix, self._dumps(stored))

    def delete(self, current: CurrentKey) -> None:
        self._write(current.db_prefix, None)

    def _write(self, row: bytes, data: bytes | None) -> None:
        self._written[row] = data
        # Counted on every write, even of a row already written: overwrites only
        # bring the flush forward, never past the bound.
        self._written_bytes += len(row) + (0 if data is None else len(data))
        if self._written_bytes >= self._cache_bytes:
            self.flush()

    def _remember(self, row: bytes, data: bytes | None) -> None:
        size = len(row) + (0 if data is None else len(data))
        if self._read_bytes + size > self._cache_bytes:
            self._read.clear()
            self._read_bytes = 0
        self._read[row] = data
        self._read_bytes += size

    def flush(self) -> None:
        """Write the rows written since the last flush into the column family."""
        if not self._written:
            return
        cf = self._cf
        for row, data in self._written.items():
            if data is None:
                cf.delete(row)
            else:
                cf.put(row, data)
        # What was just written is what the column family now holds.
        for row, data in self._written.items():
            self._remember(row, data)
        self._written.clear()
        self._written_bytes = 0

    def forget(self) -> None:
        """Flush, then drop the rows read: the column family is about to change past the table."""
        self.flush()
        self._read.clear()
        self._read_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """What the cache holds now, by its own count (at most twice `cache_bytes`)."""
        return self._written_bytes + self._read_bytes
