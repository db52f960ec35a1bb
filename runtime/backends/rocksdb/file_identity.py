"""Proof that a local file still holds the bytes a checksum was computed from.

A file's identity is its device, inode, size and modification time in
nanoseconds. Read the identity before and after reading the file whole: if
both are the same, and the modification time lies more than `SETTLED_NS`
before the read began, then any later change of the file shows in its
identity:

- a write in place sets the modification time to the kernel's clock, which
  advances in ticks of at most 10 ms; a write after the read began therefore
  gives a time after the recorded one;
- truncating or extending it changes its size; a file renamed over it (or
  deleted and made again) has another inode.

A file written less than `SETTLED_NS` ago is read once that much has passed
(a fresh SST of the flush a checkpoint makes waits at most that long, on the
upload thread). A filesystem whose timestamps have whole seconds only (a time
with no sub-second part) proves nothing. Not covered, and not meant to be: whoever
deliberately sets a changed file's time back (`utime`) — who can do that
can also write to the live database beside it; local disk is trusted as
the database's own files are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# Two of the coarsest clock ticks that stamp a write (10 ms at HZ=100).
SETTLED_NS = 20_000_000

T = TypeVar("T")


@dataclass(frozen=True)
class FileIdentity:
    device: int
    inode: int
    size: int
    mtime_ns: int

    @staticmethod
    def of(path: str | Path) -> FileIdentity:
        stat = os.stat(path)
        return FileIdentity(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def to_json(self) -> list[int]:
        return [self.device, self.inode, self.size, self.mtime_ns]

    @staticmethod
    def from_json(data: Any) -> FileIdentity:
        device, inode, size, mtime_ns = (int(n) for n in data)
        return FileIdentity(device, inode, size, mtime_ns)


def witnessed(path: str | Path, read: Callable[[], T]) -> tuple[T, FileIdentity | None]:
    """`read()`, which reads the file at `path` whole, and the identity that proves the
    file still holds what it read (None: nothing proven, see the module's doc)."""
    before = FileIdentity.of(path)
    fresh_for_ns = before.mtime_ns + SETTLED_NS - time.time_ns()
    if 0 < fresh_for_ns <= SETTLED_NS:
        time.sleep(fresh_for_ns / 1e9)
    started_ns = time.time_ns()
    result = read()
    after = FileIdentity.of(path)
    settled = before.mtime_ns < started_ns - SETTLED_NS and before.mtime_ns % 1_000_000_000 != 0
    return result, before if before == after and settled else None
