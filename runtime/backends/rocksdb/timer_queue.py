"""RocksDB timers: one column family per queue, rows (key group, timestamp, key)
with empty values, so a key group's earliest timer is one seek away. The earliest
timestamp of each key group is kept in memory (found with one seek per group when
the queue opens or after a restore), so asking what is due reads nothing."""

from __future__ import annotations

import rocksdict
from lockgate.runtime.backends.rocksdb.database import key_group_prefix, prefix_successor, rows_between
from lockgate.runtime.state.timers import POP_BATCH, DueTimer, decode_timestamp, encode_timestamp, timer_rest

_ROW_HEAD = 2  # the key group's two bytes


class RocksDBTimerQueue:
    def __init__(self, cf: rocksdict.Rdict, key_groups: range) -> None:
        self._cf = cf
        self._key_groups = key_groups
        self._heads: dict[int, int] | None = None  # per key group with timers: its earliest

    def _row(self, key_group: int, timestamp: int, key_bytes: bytes) -> bytes:
        return key_group_prefix(key_group) + timer_rest(timestamp, key_bytes)

    def _head_of(self, key_group: int, from_timestamp: int | None = None) -> int | None:
        """The earliest timestamp of one key group's timers, read from `from_timestamp`.
        Fired and deleted timers leave tombstones at the front of their group, which
        a seek from the group's start would step over one by one each time: a seek
        from a timestamp no live timer precedes skips them."""
        prefix = key_group_prefix(key_group)
        start = prefix if from_timestamp is None else prefix + encode_timestamp(from_timestamp)
        for row, _ in rows_between(self._cf, start, prefix_successor(prefix)):
            return decode_timestamp(row[_ROW_HEAD:])
        return None

    def _load_heads(self) -> dict[int, int]:
        if self._heads is None:
            heads = {group: self._head_of(group) for group in self._key_groups}
            self._heads = {group: head for group, head in heads.items() if head is not None}
        return self._heads

    def invalidate(self) -> None:
        """Rows were written underneath (a restore): read the heads again."""
        self._heads = None

    def add(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        heads = self._load_heads()
        self._cf.put(self._row(key_group, timestamp, key_bytes), b"")  # a row once, however often put
        head = heads.get(key_group)
        if head is None or timestamp < head:
            heads[key_group] = timestamp

    def remove(self, key_group: int, timestamp: int, key_bytes: bytes) -> None:
        heads = self._load_heads()
        self._cf.delete(self._row(key_group, timestamp, key_bytes))
        if heads.get(key_group) == timestamp:
            head = self._head_of(key_group, timestamp)  # no timer of the group is earlier
            if head is None:
                del heads[key_group]
            else:
                heads[key_group] = head

    def earliest(self) -> int | None:
        heads = self._load_heads()
        return min(heads.values()) if heads else None

    def pop_due(self, up_to: int, limit: int = POP_BATCH) -> list[DueTimer]:
        """Group by group, each group's due timers in (timestamp, key) order (a key's
        timers are in one group, so each key's fire in time order): one seek per
        group, its popped rows removed with one range delete, and the row where the
        scan stopped is the group's new earliest — no second seek."""
        heads = self._load_heads()
        bound = encode_timestamp(up_to)
        due: list[DueTimer] = []
        for group in sorted(g for g, head in heads.items() if head <= up_to):
            if len(due) == limit:
                break
            prefix = key_group_prefix(group)
            start = prefix + encode_timestamp(heads[group])
            rows = self._cf.iter()
            rows.seek(start)
            stop: bytes | None = None  # the first row left in the group
            while rows.valid():
                row = rows.key()
                if row[:_ROW_HEAD] != prefix:
                    break
                stamp = row[_ROW_HEAD : _ROW_HEAD + len(bound)]
                if stamp > bound or len(due) == limit:
                    stop = row
                    break
                due.append((decode_timestamp(stamp), group, row[_ROW_HEAD + len(bound) :]))
                rows.next()
            del rows
            self._cf.delete_range(start, prefix_successor(prefix) if stop is None else stop)
            if stop is None:
                del heads[group]
            else:
                heads[group] = decode_timestamp(stop[_ROW_HEAD:])
        return due
