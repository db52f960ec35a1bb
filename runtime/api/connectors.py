"""The contracts between the runtime and sources and sinks.

A `Source` is replayable: it reads partitions whose positions (offsets) the
runtime keeps in operator state and hands back on restore, so a restarted job
rereads exactly what followed its checkpoint.

A `Sink` writes through two-phase commit: records go into the epoch's
transaction; at a checkpoint barrier the writer pre-commits it and returns
committables, which the runtime stores in the checkpoint; once the checkpoint
is complete the runtime asks to commit them. Committing must be idempotent:
after a failure the restored committables are committed again. A writer is
told whose it is (`SubtaskContext`: the job, its subtask, the launch), so that
what it leaves behind can be told apart from other jobs' and other launches'.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockgate.runtime.failure_class import FailureClass

EXCHANGE_FRAME_LIMIT_BYTES = 1 << 30
"""The most one frame of a keyed exchange carries between tasks: a record larger
than this cannot cross one, so a source refuses it (or routes it aside) as it reads."""


class UnreadableRecordError(ValueError):
    """A record of a source's input that cannot be read (not in its format, too large)
    and that the source has no dead-letter location for: a restart would read it
    again, so the job stops. The message names the record (where it is) and the
    option that routes such records aside."""

    failure_class = FailureClass.DEFINITION


@dataclass(frozen=True)
class Backlog:
    """What a reader has yet to read of its partitions' current input: its lag
    (Flink's pendingRecords and pendingBytes). None where it cannot tell. A reader
    that has read everything says 0; one that cannot tell its lag at all returns
    no Backlog (`SourceReader.backlog` gives None), never a Backlog of zeros."""

    records: int | None = None
    bytes: int | None = None

    @property
    def known(self) -> bool:
        """The reader told its lag in records or bytes."""
        return self.records is not None or self.bytes is not None


class Committer:
    """What a vertex writes outside the job, made visible by two-phase commit: at a
    barrier `pre_commit` seals it and returns committables, which the runtime keeps
    in the checkpoint; once the checkpoint completes, `commit` makes them visible;
    after a restore, `recover` gets them back (union list state: every subtask's,
    at any new parallelism) to commit its share and discard the rest. A sink's
    writer is one; a source reader can be one for what it writes on the side (a
    dead-letter file). By default there is nothing to commit."""

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        """Seal the open transaction at a barrier; its committables go into the checkpoint."""
        return []

    def commit(self, committables: list[Any]) -> None:
        """Make pre-committed transactions visible; idempotent."""

    def recover(self, committables: list[Any]) -> None:
        """After a restore: commit what the checkpoint pre-committed, discard the rest."""


class SourceReader(Committer, ABC):
    """One subtask's reader of its partitions."""

    @abstractmethod
    def poll(self, max_records: int) -> list[Any]:
        """Up to `max_records` next records; an empty list when none is ready now."""

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        """`poll`, with the partition each record came from: what per-partition
        watermarks need. A reader that cannot tell reads as one partition, ""."""
        return [("", self.poll(max_records))]

    def partitions(self) -> list[str]:
        """The partitions this reader reads now, as `poll_partitions` names them."""
        return [""]

    @abstractmethod
    def offsets(self) -> dict[str, Any]:
        """Per partition, the position after the last record returned by `poll`."""

    @abstractmethod
    def reached_end(self) -> bool:
        """True when every partition has been read to the end of its current input."""

    def end_of_input(self) -> list[Any]:
        """Called once in a bounded job, when `reached_end()` said so: the records the
        reader held back waiting for more input (a last line without its newline).
        The offsets afterwards include them."""
        return []

    def backlog(self) -> Backlog | None:
        """How far behind its input the reader is, if it can tell cheaply (asked about
        once a second, between polls); None: unknown."""
        return None

    def close(self) -> None:
        """Release files and connections."""


class Source(ABC):
    """A replayable input split into partitions: each reader reads its subtask's share and
    reports its offsets, which the checkpoint keeps."""

    bounded: bool = False
    """The source knows its input is finite (Flink's Boundedness.BOUNDED): once every
    reader reached its end, it is done, and a job whose sources are all done ends
    after a final checkpoint. An unbounded source (a log that grows, a topic) ends
    only in a job run with `--bounded`, which reads every source to its current end."""

    def validate(self, job: JobIdentity) -> None:  # noqa: B027 - optional hook, nothing to check by default
        """Check, on the driver before any task starts, what the source needs (a
        location it writes on the side); raise an error naming it and the problem."""

    def missing_input(self) -> str | None:
        """Why this source would read nothing at all (its location does not exist, or
        holds nothing it reads), naming the location and what it looks for; None when
        it has input or cannot tell. Checked on the driver before any task starts: a run
        that reads its input to the end refuses the source, an unbounded run warns."""
        return None

    @abstractmethod
    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        """A reader for the subtask's share of the partitions, from `offsets`
        (the offsets of all partitions, from the restored checkpoint; empty at first)."""


class SinkWriter(Committer, ABC):
    """One subtask's writer. Exactly once: `pre_commit` at each checkpoint barrier returns
    committables that go into the checkpoint; `commit` makes them visible once the
    checkpoint completed; `recover` commits those a restored checkpoint holds (it may
    run again for the same ones)."""

    @abstractmethod
    def write(self, record: Any) -> None:
        """Take one record of the current epoch."""

    def write_batch(self, records: list[Any]) -> None:
        """Write `records` in order; the engine calls this, once per batch. A sink
        that can write a batch in fewer steps overrides it; by default, `write`
        for each record (so a subclass that overrides only `write` sees them all)."""
        write = self.write
        for record in records:
            write(record)

    @abstractmethod
    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        """At the barrier of checkpoint `checkpoint_id`: prepare what was written since the
        last barrier and return the committables, which the checkpoint keeps."""

    @abstractmethod
    def commit(self, committables: list[Any]) -> None:
        """The checkpoint holding `committables` completed: make them visible. Must be
        idempotent."""

    @abstractmethod
    def recover(self, committables: list[Any]) -> None:
        """After a restore: commit what the checkpoint pre-committed, discard the rest.
        `committables` are all of this sink's, from every old subtask (union list
        state), so each writer can take its share at any new parallelism."""

    def close(self) -> None:
        """Release files and connections (an open transaction is not committed)."""


class ForwardingSinkWriter(SinkWriter):
    """Hands every call to `inner`: subclass it to wrap a sink's writes (to measure,
    throttle or enrich them) while its transactions stay the inner sink's."""

    def __init__(self, inner: SinkWriter) -> None:
        self.inner = inner

    def write(self, record: Any) -> None:
        self.inner.write(record)

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return self.inner.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        self.inner.commit(committables)

    def recover(self, committables: list[Any]) -> None:
        self.inner.recover(committables)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class JobIdentity:
    """The job a sink writes for: its namespace and id, as in etcd and checkpoint
    storage. Two running jobs never share one."""

    namespace: str
    job: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.job}"


def _outside_a_job() -> None:
    """A context made by hand (a connector's unit test) has no control plane to ask."""


def _peers_ready(point: str) -> None:
    """Every writer of the launch was made before any recovers (one process builds
    all its tasks, then runs them), or the context was made by hand: nobody to wait for."""


@dataclass(frozen=True)
class SubtaskContext:
    """Whose a source reader or sink writer is: subtask `subtask` of `parallelism`,
    in launch `launch` of `job`. Launch numbers grow with each (re)start of the job;
    a launch runs one reader or writer per subtask of a vertex.

    `confirm_launch()` raises unless `launch` still coordinates the job, asked of the
    control plane at that moment: a task can be held (a GC pause, a frozen executor)
    while a later launch restores the same checkpoint and commits past it, so a sink
    whose commits are not idempotent asks before it acts on the restored committables.

    `rendezvous(point)` returns once every subtask of the launch has called it with
    `point`: a writer that must act after all its peers did something first (a
    transactional sink fencing every transactional id before it reads what any of
    them committed) calls it in `recover`, which every subtask calls once."""

    job: JobIdentity
    subtask: int
    parallelism: int
    launch: int
    vertex: str = ""  # the source's or sink's name in the job graph
    exactly_once: bool = True  # the job's mode; False: at-least-once
    confirm_launch: Callable[[], None] = field(default=_outside_a_job, compare=False, repr=False)
    rendezvous: Callable[[str], None] = field(default=_peers_ready, compare=False, repr=False)


class Sink(ABC):
    """Where a stream's records go: `validate` checks the location on the driver,
    `create_writer` makes each subtask's writer."""

    @abstractmethod
    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        """The writer of one subtask; called as the subtask starts, before it restores."""

    def validate(self, job: JobIdentity) -> None:  # noqa: B027 - optional hook, nothing to check by default
        """Check, on the driver before any task starts, that `job` can write here (the
        destination exists or can be made, and is writable); raise an error naming the
        destination and the problem. A sink wrapping another calls the inner one's."""
