"""`FileSink(url)`: JSON lines, exactly once through two-phase commit.

Each subtask writes the records of an epoch into a hidden in-progress file
(`.part-…inprogress`). At a checkpoint barrier the transaction is prepared:
the file is closed and renamed to a hidden pending file (`_part-…pending`),
and the (pending, final) names go into the checkpoint. When the checkpoint
completes, pending files are renamed to their final, visible names. Readers
see only names that start with neither `.` nor `_`.

After a restore, the pending files the checkpoint holds are committed (a
rename is idempotent: done twice, the second finds the final file), and every
other hidden file left by an earlier attempt is deleted.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from dataclasses import dataclass
from typing import IO, Any, Literal

import fsspec
from lockgate.runtime.api.connectors import Sink, SinkWriter

_HIDDEN = re.compile(
    r"^[._](?P<prefix>.+)-(?P<subtask>\d+)-(?P<attempt>[0-9a-f]{8})-\d+\.(inprogress|pending)$"
)


class SinkCommitError(RuntimeError):
    """A pre-committed file is gone: committing it would lose records."""


@dataclass(frozen=True, order=True)
class Committable:
    pending: str  # file names inside the sink directory
    final: str

    def to_json(self) -> list[str]:
        return [self.pending, self.final]

    @staticmethod
    def from_json(data: Any) -> Committable:
        pending, final = data
        return Committable(str(pending), str(final))


class Transaction:
    """One epoch's file: open -> prepared -> committed, or aborted."""

    def __init__(self, fs: Any, directory: str, stem: str) -> None:
        self._fs = fs
        self._directory = directory
        self.stem = stem
        self.state: Literal["open", "prepared", "committed", "aborted"] = "open"
        self._stream: IO[bytes] | None = None
        self.records = 0

    @property
    def in_progress(self) -> str:
        return f".{self.stem}.inprogress"

    def write(self, line: bytes) -> None:
        if self.state != "open":
            raise RuntimeError(f"transaction {self.stem} is {self.state}; it cannot take records")
        if self._stream is None:
            self._stream = self._fs.open(f"{self._directory}/{self.in_progress}", "wb")
        self._stream.write(line)
        self.records += 1

    def prepare(self, checkpoint_id: int) -> Committable | None:
        if self.state != "open":
            raise RuntimeError(f"transaction {self.stem} is {self.state}; only an open one can prepare")
        self.state = "prepared"
        if self._stream is None:
            return None  # nothing written this epoch
        self._stream.close()
        self._stream = None
        pending = f"_{self.stem}.pending"
        self._fs.mv(f"{self._directory}/{self.in_progress}", f"{self._directory}/{pending}")
        return Committable(pending, f"{self.stem}-chk{checkpoint_id}.jsonl")

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            self._fs.rm(f"{self._directory}/{self.in_progress}")
        self.state = "aborted"


class FileSink(Sink):
    def __init__(self, url: str, prefix: str = "part") -> None:
        if "/" in prefix or prefix.startswith((".", "_")):
            raise ValueError(f"FileSink prefix {prefix!r} must be a plain, visible file name prefix")
        self.url = url
        self.prefix = prefix

    def create_writer(self, subtask: int, parallelism: int) -> FileSinkWriter:
        return FileSinkWriter(self, subtask, parallelism)


class FileSinkWriter(SinkWriter):
    def __init__(self, sink: FileSink, subtask: int, parallelism: int) -> None:
        fs, root = fsspec.core.url_to_fs(sink.url)
        self._fs: Any = fs
        self._directory = root.rstrip("/")
        self._fs.makedirs(self._directory, exist_ok=True)
        self._sink = sink
        self._subtask = subtask
        self._parallelism = parallelism
        self._attempt = uuid.uuid4().hex[:8]
        self._sequence = 0
        self._transaction = self._begin()

    def _begin(self) -> Transaction:
        stem = f"{self._sink.prefix}-{self._subtask}-{self._attempt}-{self._sequence}"
        self._sequence += 1
        return Transaction(self._fs, self._directory, stem)

    def write(self, record: Any) -> None:
        self._transaction.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        committable = self._transaction.prepare(checkpoint_id)
        self._transaction = self._begin()
        return [] if committable is None else [committable.to_json()]

    def commit(self, committables: list[Any]) -> None:
        for data in committables:
            committable = Committable.from_json(data)
            pending = f"{self._directory}/{committable.pending}"
            final = f"{self._directory}/{committable.final}"
            if self._fs.exists(pending):
                self._fs.mv(pending, final)
            elif not self._fs.exists(final):
                raise SinkCommitError(
                    f"{self._sink.url}: pending file {committable.pending} of a completed "
                    "checkpoint is missing; its records cannot be committed"
                )

    def recover(self, committables: list[Any]) -> None:
        """`committables`: every committable of this sink in the restored checkpoint.
        This subtask commits its round-robin share and deletes the leftovers of the
        old subtasks whose index maps to it."""
        ordered = sorted(Committable.from_json(c) for c in committables)
        mine = [c for i, c in enumerate(ordered) if i % self._parallelism == self._subtask]
        self.commit([c.to_json() for c in mine])
        keep = {c.pending for c in ordered}
        for path in self._fs.ls(self._directory, detail=False):
            name = posixpath.basename(path.rstrip("/"))
            match = _HIDDEN.match(name)
            if match is None or match["prefix"] != self._sink.prefix or name in keep:
                continue
            old_subtask = int(match["subtask"])
            if old_subtask % self._parallelism == self._subtask and match["attempt"] != self._attempt:
                self._fs.rm(path)

    def close(self) -> None:
        self._transaction.abort()


def read_committed(url: str) -> list[Any]:
    """Every record in the committed (visible) files of a FileSink directory."""
    fs, root = fsspec.core.url_to_fs(url)
    records: list[Any] = []
    for path in sorted(fs.ls(root, detail=False)):
        name = posixpath.basename(path.rstrip("/"))
        if name.startswith((".", "_")):
            continue
        with fs.open(path, "rb") as stream:
            records.extend(json.loads(line) for line in stream if line.strip())
    return records
