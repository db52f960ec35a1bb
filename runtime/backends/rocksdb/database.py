"""How the RocksDB backend lays out its database: options, column families, row keys.

Every row key starts with its key group as two big-endian bytes, so one key
group is one contiguous key range.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rocksdict


def key_group_prefix(key_group: int) -> bytes:
    return key_group.to_bytes(2, "big")


def prefix_successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with `prefix`."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\xff" * (len(prefix) + 1)
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


def rows_between(cf: Any, start: bytes, end: bytes, *, drop: int = 0) -> Iterator[tuple[bytes, bytes]]:
    """The rows of `cf` from key `start` up to (not including) `end`, in key order,
    each key without its first `drop` bytes. RocksDB stops at `end` (an iterate upper
    bound) and hands each row over in one call: twice as fast as stepping an iterator
    (a straddling restore copies hundreds of thousands of rows this way)."""
    bounded = rocksdict.ReadOptions()
    bounded.set_iterate_upper_bound(end)
    rows: Iterator[tuple[bytes, bytes]] = cf.items(from_key=start, read_opt=bounded)
    if drop:
        for row, data in rows:
            yield row[drop:], data
    else:
        yield from rows


def list_column_families(path: Path) -> list[str]:
    """The state column families of the database at `path` (without "default")."""
    return [n for n in rocksdict.Rdict.list_cf(str(path), db_options()) if n != "default"]


def open_database(path: Path, names: list[str], **options: Any) -> rocksdict.Rdict:
    """The database at `path` with its state column families `names`."""
    families = {name: column_family_options() for name in names}
    return rocksdict.Rdict(str(path), db_options(), column_families=families or None, **options)


def column_family_options() -> rocksdict.Options:
    """A state's column family. Most point reads ask for a key that is not there (a
    window or a timer about to open, a key seen for the first time): a bloom filter
    per table file, and one over the memtable's keys, answer those without a search."""
    options = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)  # ~1 % false positives; one filter per file, not per block
    options.set_block_based_table_factory(table)
    # 2 % of the memtable's size: ~10 bits per entry of a full 64 MiB memtable of small rows.
    options.set_memtable_prefix_bloom_ratio(0.02)
    options.set_memtable_whole_key_filtering(True)
    return options


def db_options() -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(2)
    return options


def write_options() -> rocksdict.WriteOptions:
    """Every write of the backend: WAL off, since durability comes from checkpoints."""
    options = rocksdict.WriteOptions()
    # rocksdict's stubs declare a method; at run time it is a property.
    options.disable_wal = True  # type: ignore[method-assign, assignment]
    return options
