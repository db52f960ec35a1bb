"""The JSON records stored under a job's etcd keys."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from lockgate.runtime.failure_class import FailureClass
from lockgate.runtime.snapshot.metadata import SnapshotKind, SubtaskState

R = TypeVar("R")


def encode(record: Any) -> bytes:
    return json.dumps(record.to_json() if hasattr(record, "to_json") else asdict(record)).encode()


def decode(cls: type[R], data: bytes) -> R:
    raw: dict[str, Any] = json.loads(data)
    from_json = getattr(cls, "from_json", None)
    return from_json(raw) if from_json is not None else cls(**raw)


@dataclass(frozen=True)
class CoordinatorRecord:
    """Who coordinates a job now; it keeps the job while it beats (Leadership)."""

    coordinator_id: str
    host: str
    pid: int
    started_ms: int
    # The job's launch number: allocated by compare-and-swap when this coordinator
    # took the job, one higher than any before it. Everything of this launch carries it.
    launch: int = 0


@dataclass(frozen=True)
class Trigger:
    """Take snapshot `checkpoint_id` into `target` (a storage URL of the snapshot directory)."""

    checkpoint_id: int
    launch: int
    kind: SnapshotKind
    target: str
    timestamp_ms: int
    stop: bool = False


@dataclass(frozen=True)
class Ack:
    """A subtask's answer to a trigger: its state handles, or why it declined.
    `launch` is the answering task's own launch, never copied from the trigger."""

    checkpoint_id: int
    launch: int
    state: SubtaskState | None = None
    declined: str | None = None
    # A bounded source subtask that reached the end of its input before this
    # barrier and will emit nothing more.
    drained: bool = False
    # Records its sinks took in the epoch this barrier ends: committed with the checkpoint.
    records: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "state": None if self.state is None else self.state.to_json()}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Ack:
        state = data.get("state")
        return Ack(
            checkpoint_id=int(data["checkpoint_id"]),
            launch=int(data["launch"]),
            state=None if state is None else SubtaskState.from_json(state),
            declined=data.get("declined"),
            drained=bool(data.get("drained", False)),
            records=int(data.get("records", 0)),
        )


@dataclass(frozen=True)
class CompletedCheckpoint:
    """The summary `checkpoints/completed/<n>` holds."""

    checkpoint_id: int
    kind: SnapshotKind
    path: str
    parallelism: dict[str, int]
    max_parallelism: int
    bytes: int
    trigger_ms: int
    completed_ms: int
    # Every source was drained at this checkpoint: it holds all the job's output,
    # and once sinks commit it, a bounded job is finished.
    final: bool = False
    # The launch whose tasks took it: only they commit its sink transactions.
    launch: int = 0
    # Records the job's sinks committed with it: those of the epoch it ends.
    records: int = 0
    # The SHA-256 of its `_metadata` as the coordinator wrote it: a restore takes only
    # that file (None: recorded before digests were).
    metadata_sha256: str | None = None

    @property
    def duration_ms(self) -> int:
        return self.completed_ms - self.trigger_ms

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "duration_ms": self.duration_ms}

    @staticmethod
    def from_json(data: dict[str, Any]) -> CompletedCheckpoint:
        return CompletedCheckpoint(**{k: v for k, v in data.items() if k != "duration_ms"})


@dataclass(frozen=True)
class SavepointRequest:
    stop: bool = False
    dir: str | None = None


@dataclass(frozen=True)
class SavepointResult:
    status: Literal["pending", "completed", "failed"]
    path: str | None = None
    error: str | None = None
    checkpoint_id: int | None = None
    bytes: int | None = None  # the size of the savepoint's state files, once completed
    metadata_sha256: str | None = None  # its `_metadata`'s, as in `CompletedCheckpoint`


@dataclass(frozen=True)
class RescaleRequest:
    parallelism: int
    generation: int | None = None  # the StreamingJob's, when the operator asks


RescaleStatus = Literal["pending", "rescaled", "refused", "failed"]


@dataclass(frozen=True)
class RescaleResult:
    """`refused`: the job runs on as it was (the reason says why, before anything
    stopped); `failed`: the rescale's checkpoint did not complete, and the job was
    relaunched at its old parallelism from its latest checkpoint."""

    status: RescaleStatus
    parallelism: int  # the job's, once final: the target when rescaled
    reason: str | None = None
    checkpoint_id: int | None = None  # the checkpoint the new parallelism restored
    stopped_ms: int | None = None  # when the old tasks were told to stop
    relaunched_ms: int | None = None  # when the new tasks were started


JobState = Literal["running", "finished", "stopped", "failed"]


@dataclass(frozen=True)
class JobStatus:
    """What the driver says of its job under `status`: while `running`, a heartbeat
    bound to the driver's lease (`at_ms` advances); at the end, the outcome, kept."""

    state: JobState
    at_ms: int
    parallelism: int
    restarts: int = 0
    savepoint: str | None = None  # where a stop with savepoint left the state
    message: str | None = None  # why the job failed
    # Which driver says so (its pod's name on a cluster): a successor starting up
    # is not taken for the one whose outcome is still recorded.
    driver: str | None = None
    # A failed job's: what kind of failure ended it, and the job's part of its
    # traceback when the job's code is to blame (bounded: failure_class.bounded).
    failure_class: FailureClass | None = None
    traceback: str | None = None

    def __post_init__(self) -> None:
        if self.failure_class is not None:  # decoded from JSON as its value
            object.__setattr__(self, "failure_class", FailureClass(self.failure_class))
