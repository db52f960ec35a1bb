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
(`CACHE_BYTES`, counted as row and value lengths plus what Python spends on an
entry): a table whose written rows reach it flushes them; one whose read rows
reach it forgets the older half of them. The bound is also the longest stall: the written
rows are put into RocksDB in the synchronous part of the next checkpoint
(16 MiB, about 100,000 small rows, took about 0.15 s on a 2-core machine).

The backend flushes before anything reads the column family past the table
(the synchronous part of a snapshot, the TTL sweep) and makes the table forget
what it read before anything writes past it (a restore, a TTL sweep, dropping
foreign key groups). Rows written and not flushed are lost with the process,
as RocksDB's memtable is without a WAL: durability comes from checkpoints.
"""

from __future__ import annotations

import itertools
from typing import Any

import rocksdict
from lockgate.runtime.backends.rocksdb.database import write_options
from lockgate.runtime.state.codecs import Codec, codec_for
from lockgate.runtime.state.descriptors import StateDescriptor
from lockgate.runtime.state.tables import MISSING, CurrentKey

# Per table and per dict (written, read): about 100,000 rows of small keys and values.
CACHE_BYTES = 16 * 1024 * 1024
# What Python spends on one cached row beyond its bytes' lengths: two bytes objects'
# headers and a dict slot (measured 110-170 bytes on CPython 3.11, 64-bit).
ENTRY_OVERHEAD = 160

# Not in a dict: distinct from None, which caches "no such row".
_UNCACHED: Any = object()


class RocksDBValueTable:
    def __init__(
        self, descriptor: StateDescriptor, cf: rocksdict.Rdict, *, cache_bytes: int = CACHE_BYTES
    ) -> None:
        self.codec: Codec = codec_for(descriptor)
        self._cf = cf
        self._handle = cf.get_column_family_handle(descriptor.name)
        self._write_options = write_options()
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
        written = self._written
        earlier = written.get(row, _UNCACHED)
        # What `_size` counts, inline: this runs for every write.
        grown = 0 if data is None else len(data)
        if earlier is _UNCACHED:
            grown += ENTRY_OVERHEAD + len(row)
        elif earlier is not None:  # a hot key written again: only its value's length may change
            grown -= len(earlier)
        self._written_bytes += grown
        written[row] = data
        if self._written_bytes >= self._cache_bytes:
            self.flush()

    def _remember(self, row: bytes, data: bytes | None) -> None:
        """Cache a row read that was not cached."""
        size = _size(row, data)
        while self._read and self._read_bytes + size > self._cache_bytes:
            self._forget_oldest_half()  # again if the older half was small rows
        self._read[row] = data
        self._read_bytes += size

    def _forget_oldest_half(self) -> None:
        """Make room by the older half of the rows read (a dict keeps insertion order).
        Forgetting them all would make a state slightly larger than the cache miss
        on nearly every read; this way about the share that does not fit misses."""
        read = self._read
        for row in list(itertools.islice(read, (len(read) + 1) // 2)):
            self._read_bytes -= _size(row, read.pop(row))

    def flush(self) -> None:
        """Write the rows written since the last flush into the column family."""
        if not self._written:
            return
        # One batch: every call into rocksdict gives up the GIL, and under a source
        # thread's load a put per row took 2-4 us against about 1 in a batch.
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self._handle
        for row, data in self._written.items():
            if data is None:
                batch.delete(row, handle)
            else:
                batch.put(row, data, handle)
        self._cf.write(batch, self._write_options)
        # What was just written is what the column family now holds.
        read = self._read
        for row, data in self._written.items():
            earlier = read.pop(row, _UNCACHED)
            if earlier is not _UNCACHED:
                self._read_bytes -= _size(row, earlier)
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


def _size(row: bytes, data: bytes | None) -> int:
    return ENTRY_OVERHEAD + len(row) + (0 if data is None else len(data))
