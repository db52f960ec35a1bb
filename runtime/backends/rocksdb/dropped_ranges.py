"""Compacting away, in the background, the key groups a native restore range-deleted.

A restore that opens another subtask's files deletes the key groups it does not
own with range tombstones: their rows stay in the SST files until RocksDB
compacts them, and every checkpoint references those files (1,655 MB for
1,050 MB live after a rescale 2 -> 3, docs/benchmarks.md). At the first
checkpoint completed `DELAY_S` or more after the restore (by the backend's
clock) a thread compacts the deleted ranges of each column family (a manual
compaction releases the GIL). It rewrites the files that overlap them, live
rows too (a memtable flush's file spans every key group), and the next
checkpoint uploads what it wrote — hundreds of MB at 1 GB of state. A
checkpoint that stops the job for a rescale waits for that upload, so the
compaction does not start at once: a rescale soon after another (a corrected
target, the autoscaler catching up) would pay seconds of downtime for it
(measured: 237 MB, +2 s, docs/benchmarks.md). A backend that closes meanwhile
cancels it (RocksDB's background work is cancelled and the thread joined): a
rescale does not wait for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

KeyRange = tuple[bytes | None, bytes | None]  # None: unbounded on that side

DELAY_S = 30.0


class DroppedRangeCompaction:
    """The compaction of `ranges` in a backend's column families, due from `due_ms`
    (the backend's monotonic clock) on."""

    def __init__(self, ranges: list[KeyRange], due_ms: int) -> None:
        self.ranges = ranges
        self.due_ms = due_ms
        self.finished = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def due(self, now_ms: int) -> bool:
        """Whether to start it now (not started yet, and due)."""
        return not self.started and now_ms >= self.due_ms

    def start(self, families: list[Any]) -> None:
        """Compact `families` (column families of their own: the task's threads use others)."""
        self._thread = threading.Thread(
            target=self._run, args=(families,), name="compact-dropped-ranges", daemon=True
        )
        self._thread.start()

    def _run(self, families: list[Any]) -> None:
        try:
            for cf in families:
                for begin, end in self.ranges:
                    cf.compact_range(begin, end)
        except Exception:  # cancelled by a close: RocksDB compacts them some time later
            log.info("compaction of the key groups a restore deleted ended early", exc_info=True)
        finally:
            families.clear()
            self.finished.set()

    def cancel(self, db: Any) -> bool:
        """Stop a running compaction before `db` closes; whether one was stopped (then
        RocksDB is shutting down and refuses a clean close)."""
        if self._thread is None or self.finished.is_set():
            return False
        db.cancel_all_background(True)
        self._thread.join()
        return True
