"""`CollectSink(name)`: committed records in a list of this process, for tests.

Two-phase like `FileSink`, with this process's memory as the external system: at
a barrier a writer's records are pre-committed as one transaction that carries
them (so the checkpoint, or a savepoint, holds them), and they are appended to
the list of `name` when the checkpoint completes. Each record is pickled when it
is written, as a `FileSink` encodes it then: a record the job changes after it
emitted it is committed as it was. A transaction's id is remembered once
committed, so committing it again after a restore adds nothing; `forget(name)`
lets go of the ids committed under `name`, and `count_as_committed` gives them
back (a savepoint restored in another process).

The list must be opened (`CollectSink.reset(name)`) in the process that reads it
before the job runs: a commit into a name never opened there — a writer on a
Spark executor, whose list nobody would ever read — fails instead of losing the
records quietly.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from lockgate.runtime.api.connectors import Sink, SinkWriter, SubtaskContext
from lockgate.runtime.connectors.file_sink import SinkCommitError


@dataclass(frozen=True)
class CollectedRecords:
    """One pre-committed transaction: what `subtask` wrote between two barriers."""

    id: str
    subtask: int
    records: tuple[bytes, ...]  # pickled


class CollectSink(Sink):
    """Committed records into a list of this process (`CollectSink.committed(name)`),
    exactly once: for tests."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _committed: ClassVar[dict[str, list[Any]]] = {}
    # Per name, the transactions committed into it (or counted as committed: those a
    # restored savepoint holds that an earlier run made visible).
    _ids_by_name: ClassVar[dict[str, set[str]]] = {}

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"CollectSink name must be a non-empty string, got {name!r}")
        self.name = name

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return CollectSinkWriter(self.name, context)

    @classmethod
    def committed(cls, name: str) -> list[Any]:
        """The records committed so far under `name`, in commit order."""
        with cls._lock:
            return list(cls._committed.get(name, []))

    @classmethod
    def reset(cls, name: str) -> None:
        """Open `name` in this process with nothing committed."""
        with cls._lock:
            cls._committed[name] = []
            cls._ids_by_name[name] = set()

    @classmethod
    def forget(cls, name: str) -> None:
        """Close `name`: its records and the ids of its transactions are dropped, and
        later commits into it fail."""
        with cls._lock:
            cls._committed.pop(name, None)
            cls._ids_by_name.pop(name, None)

    @classmethod
    def committed_ids(cls, name: str) -> frozenset[str]:
        """The ids of the transactions committed under `name`."""
        with cls._lock:
            return frozenset(cls._ids_by_name.get(name, ()))

    @classmethod
    def count_as_committed(cls, name: str, ids: frozenset[str]) -> None:
        """Treat `ids` as committed (under `name`, until it is forgotten)."""
        with cls._lock:
            cls._ids_by_name.setdefault(name, set()).update(ids)

    @classmethod
    def _commit(cls, name: str, transactions: list[CollectedRecords]) -> None:
        with cls._lock:
            committed = cls._committed.get(name)
            if committed is None:
                raise SinkCommitError(
                    f"CollectSink {name!r} is not open in this process (CollectSink.reset({name!r})); "
                    "it works only where the job's tasks run in the reader's process, as lockgate.testing "
                    "runs them (use FileSink on Spark)"
                )
            ids = cls._ids_by_name.setdefault(name, set())
            for transaction in transactions:
                if transaction.id not in ids:
                    ids.add(transaction.id)
                    committed.extend(pickle.loads(record) for record in transaction.records)


class CollectSinkWriter(SinkWriter):
    def __init__(self, name: str, context: SubtaskContext) -> None:
        self._name = name
        self._context = context
        self._open: list[bytes] = []

    def write(self, record: Any) -> None:
        self._open.append(pickle.dumps(record))

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        if not self._open:
            return []
        transaction = CollectedRecords(uuid.uuid4().hex, self._context.subtask, tuple(self._open))
        self._open = []
        return [transaction]

    def commit(self, committables: list[Any]) -> None:
        CollectSink._commit(self._name, committables)

    def recover(self, committables: list[Any]) -> None:
        """Every old subtask's transactions come to every writer (union list state):
        each commits those of the old subtasks that map to it, in their order, so that
        at any new parallelism each old subtask's output stays in order."""
        parallelism, subtask = self._context.parallelism, self._context.subtask
        self.commit([t for t in committables if t.subtask % parallelism == subtask])
