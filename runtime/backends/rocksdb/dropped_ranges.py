"""Compacting away, in the background, the key groups a native restore range-deleted.

A restore that opens another subtask's files deletes the key groups it does not
own with range tombstones: their rows stay in the SST files until RocksDB
compacts them, and every checkpoint references those files (1,655 MB for
1,050 MB live after a rescale 2 -> 3, docs/benchmarks.md). Once the first
checkpoint after the restore has completed — every subtask of the launch
restored, records flowing, so not inside a rescale's downtime — a thread
compacts the deleted ranges of each column family (a manual compaction releases
the GIL). The next checkpoint uploads the files it wrote, which hold the live
rows around the ranges' ends, and no longer references the dead ones. A backend
that closes meanwhile cancels it (RocksDB's background work is cancelled and
the thread joined): a rescale does not wait for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

KeyRange = tuple[bytes | None, bytes | None]  # None: unbounded on that side


class DroppedRangeCompaction:
    """The compaction of `ranges` in a backend's column families, once started."""

    def __init__(self, ranges: list[KeyRange]) -> None:
        self.ranges = ranges
        self.finished = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

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
