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
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any, Literal

from lockgate.operator.conditions import epoch_of, iso_time

# What the operator takes savepoints for by itself; the reason of every entry.
OPERATOR_REASONS = frozenset({"upgrade", "suspend", "periodic"})
_SAVEPOINT_NAME = re.compile(r"^savepoint-[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class SavepointEntry:
    """One savepoint the operator asked for, completed or failed."""

    reason: str
    time: str  # RFC 3339, when the answer came
    status: Literal["completed", "failed"]
    path: str | None = None
    bytes: int | None = None
    error: str | None = None
    request: str | None = None
    """A failed one's request id while its answer may still come (it timed out)."""

    @classmethod
    def from_status(cls, stored: Any) -> SavepointEntry | None:
        """An entry as status holds it, or None for what is no entry (anyone who can
        write status could have put anything there). One written before sizes and
        failures were kept (path, time, reason) is a completed savepoint."""
        if not isinstance(stored, dict):
            return None

        def text(name: str) -> str | None:
            value = stored.get(name)
            return value if isinstance(value, str) and value else None

        size = stored.get("bytes")
        return cls(
            reason=text("reason") or "",
            time=text("time") or "",
            status="failed" if stored.get("status") == "failed" else "completed",
            path=text("path"),
            bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
            error=text("error"),
            request=text("request"),
        )

    def for_status(self) -> dict[str, Any]:
        """The fields by name (the names are status's keys), those unset left out."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    def age_s(self, now: float) -> float:
        """0 for a time that cannot be read: such an entry leaves by count alone."""
        taken = epoch_of(self.time)
        return 0.0 if taken is None else now - taken


def history_of(status: dict[str, Any]) -> list[SavepointEntry]:
    """`status.savepoints`, or what an earlier operator kept as `savepointHistory`."""
    stored = status.get("savepoints", status.get("savepointHistory"))
    entries = [SavepointEntry.from_status(entry) for entry in stored] if isinstance(stored, list) else []
    return [entry for entry in entries if entry is not None]


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
        self, history: list[SavepointEntry], now: float, protected: Collection[str]
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
