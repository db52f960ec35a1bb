"""A job's savepoints as `status.savepoints` lists them (newest first), and which
of them fall out of the history kept by count and age.

A savepoint that falls out is disposed of — its directory deleted — only when
the operator took it on its own account (an upgrade, a suspension, a periodic
one) and it lies directly in the job's savepoint directory: one a user asked
for (`triggerNonce`, deletion) leaves the history and keeps its files, and a
path the driver reported elsewhere is never deleted with the operator's
credentials. Never disposed: the newest completed savepoint, the one the
current launch restored (its driver restores it again until it has a
checkpoint of its own), the one a suspended job resumes from, and any the
job's etcd still lists among its completed snapshots. An entry leaves the
history only once its files are gone: a disposal that failed is retried at the
next observation.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Sequence
from typing import Literal

from lockgate.operator.conditions import STORED, Timestamp, epoch_of, iso_time
from pydantic.dataclasses import dataclass

MAX_ENTRIES = 100
"""The most `status.savepoints` holds (the CRD's `maxItems`: the API server refuses a longer one)."""
# What the operator takes savepoints for by itself; the reason of every entry.
OPERATOR_REASONS = frozenset({"upgrade", "suspend", "periodic"})
_SAVEPOINT_NAME = re.compile(r"^savepoint-[A-Za-z0-9._-]+$")


@dataclass(frozen=True, config=STORED)
class SavepointEntry:
    """One savepoint the operator asked for, completed or failed."""

    reason: str
    """upgrade, suspend, periodic, trigger nonce N, deletion"""
    time: Timestamp
    """When the answer came."""
    status: Literal["completed", "failed"]
    path: str | None = None
    bytes: int | None = None
    """The size of the savepoint's state files."""
    error: str | None = None
    """Why it failed, or why its files could not be disposed of."""
    request: str | None = None
    """A timed-out request whose answer may still come."""

    def age_s(self, now: float) -> float:
        """0 for a time that cannot be read: such an entry leaves by count alone."""
        taken = epoch_of(self.time)
        return 0.0 if taken is None else now - taken


def completed(path: str, reason: str, size: int | None, now: float) -> SavepointEntry:
    return SavepointEntry(reason, iso_time(now), "completed", path=path, bytes=size)


def failed(reason: str, error: str, now: float, request: str | None = None) -> SavepointEntry:
    return SavepointEntry(reason, iso_time(now), "failed", error=error, request=request)


@dataclass(frozen=True)
class Retention:
    """What the history keeps: `count` newest entries, none older than `max_age_s`."""

    count: int
    max_age_s: float | None = None

    def split(
        self, history: Sequence[SavepointEntry], now: float, protected: Collection[str]
    ) -> tuple[list[SavepointEntry], list[SavepointEntry]]:
        """(kept, fallen out), each newest first. The newest completed savepoint, the
        protected paths and the entries still awaiting an answer are kept whatever
        their place or age."""
        newest = next((entry for entry in history if entry.status == "completed"), None)
        kept: list[SavepointEntry] = []
        out: list[SavepointEntry] = []
        for index, entry in enumerate(history):
            too_old = self.max_age_s is not None and entry.age_s(now) > self.max_age_s
            keep = index < self.count and not too_old
            awaited = entry.request is not None  # its answer may still come, with files to track
            if keep or awaited or entry is newest or (entry.path is not None and entry.path in protected):
                kept.append(entry)
            else:
                out.append(entry)
        return kept, out


def disposable(entry: SavepointEntry, savepoint_dir: str) -> bool:
    """Whether the operator deletes `entry`'s files when it falls out of the history."""
    if entry.status != "completed" or entry.path is None or entry.reason not in OPERATOR_REASONS:
        return False
    parent, name = posixpath.split(entry.path.rstrip("/"))
    return parent == savepoint_dir.rstrip("/") and bool(_SAVEPOINT_NAME.match(name)) and ".." not in name
