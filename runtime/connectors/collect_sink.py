"""`CollectSink(name)`: committed records in a list of this process, for tests.

Two-phase like `FileSink`, but the transactions live in process memory:
records of an epoch are held under a token at the barrier and appended to the
visible list when the checkpoint completes. It therefore works only where the
tasks run in the test's own process (the in-process runner); a restore that
finds a committed-to-be token missing fails loudly instead of losing records.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, ClassVar

from lockgate.runtime.api.connectors import Sink, SinkWriter, SubtaskContext
from lockgate.runtime.connectors.file_sink import SinkCommitError


class CollectSink(Sink):
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _pending: ClassVar[dict[str, list[Any]]] = {}
    _committed: ClassVar[dict[str, list[Any]]] = {}
    _committed_tokens: ClassVar[set[str]] = set()

    def __init__(self, name: str) -> None:
        if not name or "/" in name or "#" in name:
            raise ValueError(f"CollectSink name {name!r} must be non-empty, without '/' or '#'")
        self.name = name

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return CollectSinkWriter(self.name, context.subtask, context.parallelism)

    @classmethod
    def committed(cls, name: str) -> list[Any]:
        """The records committed so far under `name`, in commit order."""
        with cls._lock:
            return list(cls._committed.get(name, []))

    @classmethod
    def reset(cls, name: str) -> None:
        with cls._lock:
            cls._committed.pop(name, None)
            for token in [t for t in cls._pending if t.startswith(f"{name}/")]:
                del cls._pending[token]
            cls._committed_tokens -= {t for t in cls._committed_tokens if t.startswith(f"{name}/")}


class CollectSinkWriter(SinkWriter):
    def __init__(self, name: str, subtask: int, parallelism: int) -> None:
        self._name = name
        self._subtask = subtask
        self._parallelism = parallelism
        self._attempt = uuid.uuid4().hex[:8]
        self._open: list[Any] = []

    def write(self, record: Any) -> None:
        self._open.append(record)

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        if not self._open:
            return []
        token = f"{self._name}/{self._subtask}/{self._attempt}/{checkpoint_id}"
        with CollectSink._lock:
            CollectSink._pending[token] = self._open
        self._open = []
        return [token]

    def commit(self, committables: list[Any]) -> None:
        with CollectSink._lock:
            for token in committables:
                if token in CollectSink._committed_tokens:
                    continue  # committed before a failure; the restore commits it again
                records = CollectSink._pending.pop(token, None)
                if records is None:
                    raise SinkCommitError(
                        f"CollectSink {self._name!r}: the records of {token} are not in this process; "
                        "CollectSink works only with the in-process runner (use FileSink on Spark)"
                    )
                CollectSink._committed.setdefault(self._name, []).extend(records)
                CollectSink._committed_tokens.add(token)

    def recover(self, committables: list[Any]) -> None:
        """Commit this subtask's share of the restored checkpoint's tokens; drop the
        held records of earlier attempts that no checkpoint completed (they are
        replayed from the sources)."""
        ordered = sorted(committables)
        self.commit([t for i, t in enumerate(ordered) if i % self._parallelism == self._subtask])
        keep = set(ordered)
        with CollectSink._lock:
            for token in list(CollectSink._pending):
                name, subtask, attempt, _ = token.rsplit("/", 3)
                mine = int(subtask) % self._parallelism == self._subtask
                if name == self._name and mine and attempt != self._attempt and token not in keep:
                    del CollectSink._pending[token]
