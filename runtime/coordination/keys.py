"""The etcd keys of a job: the contract between operator, driver, tasks and tools.

/lockgate/<namespace>/<job>/coordinator                 record of the driver that coordinates the job
/lockgate/<namespace>/<job>/coordinator-heartbeat       a count that driver moves up every TTL / 3, under
                                                        the guard of its record: a successor takes over
                                                        once it stands still for a TTL (Leadership)
/lockgate/<namespace>/<job>/launch                      the newest launch number (the fencing epoch)
/lockgate/<namespace>/<job>/checkpoints/trigger         current trigger
/lockgate/<namespace>/<job>/checkpoints/last-id         the last checkpoint id allocated
/lockgate/<namespace>/<job>/checkpoints/acks/<n>/<vertex>/<subtask>
/lockgate/<namespace>/<job>/checkpoints/completed/<n>   summary of a completed checkpoint, with
                                                        the SHA-256 of its `_metadata`
/lockgate/<namespace>/<job>/checkpoints/latest          n
/lockgate/<namespace>/<job>/checkpoints/unusable/<n>    checkpoint n failed verification: never
                                                        restored again (UnusableCheckpoint)
/lockgate/<namespace>/<job>/savepoints/requests/<id>    {stop, dir}
/lockgate/<namespace>/<job>/savepoints/results/<id>     {status, path, error, metadata_sha256}
/lockgate/<namespace>/<job>/rescales/requests/<id>      {parallelism, generation}
/lockgate/<namespace>/<job>/rescales/results/<id>       {status, parallelism, reason, checkpoint_id}
/lockgate/<namespace>/<job>/status                      lease-bound heartbeat of the running job,
                                                        then its outcome, kept (JobStatus)
/lockgate/<namespace>/<job>/sources/drained/<vertex>/<subtask>
                                                        a bounded source subtask reached its end
/lockgate/<namespace>/<job>/tasks/progress/<launch>/<subtask>
                                                        records read and written and each chain's
                                                        load counters (busy time, records in,
                                                        backlog), every second
/lockgate/<namespace>/<job>/autoscaler                  the driver's autoscaler: recommendation,
                                                        the inputs it used, its last decisions
                                                        (AutoscalerStatus), every sample interval
/lockgate/<namespace>/<job>/tasks/exchange/<launch>/<subtask>
                                                        the host:port a task of that launch
                                                        takes exchange connections on
/lockgate/<namespace>/<job>/tasks/failure/<launch>      the failure a task of that launch blamed
                                                        on the job's code or input
/lockgate/<namespace>/<job>/tasks/rendezvous/<launch>/<point>/<subtask>
                                                        a task of that launch reached a point
                                                        of its start every task must reach
                                                        before any goes on (Task.run)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def check_name(kind: str, name: str, *, say_kind: bool = True) -> str:
    """`name`, if it may name a job or a namespace. `say_kind=False`: the message
    leaves `kind` out, where the field or flag in front of it already names it."""
    if not _NAME.match(name):
        raise ValueError(
            f"{kind + ' ' if say_kind else ''}{name!r} is not a valid name: use letters, digits, "
            "'.', '_' and '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class JobKeys:
    namespace: str
    job: str

    def __post_init__(self) -> None:
        check_name("namespace", self.namespace)
        check_name("job id", self.job)

    @property
    def root(self) -> bytes:
        return f"/lockgate/{self.namespace}/{self.job}/".encode()

    def _key(self, suffix: str) -> bytes:
        return self.root + suffix.encode()

    @property
    def coordinator(self) -> bytes:
        return self._key("coordinator")

    @property
    def coordinator_heartbeat(self) -> bytes:
        """Starts with `coordinator`: one prefix watch sees the record and its beats."""
        return self._key("coordinator-heartbeat")

    @property
    def launch(self) -> bytes:
        """The newest launch number; each coordinator moves it up by compare-and-swap."""
        return self._key("launch")

    @property
    def last_checkpoint_id(self) -> bytes:
        """The last checkpoint id allocated; each trigger moves it up by compare-and-swap."""
        return self._key("checkpoints/last-id")

    @property
    def status(self) -> bytes:
        return self._key("status")

    @property
    def progress(self) -> bytes:
        """Per launch and task: records read and written so far, for progress displays."""
        return self._key("tasks/progress/")

    def progress_of(self, launch: int, task: int) -> bytes:
        return self._key(f"tasks/progress/{launch}/{task}")

    def progress_of_launch(self, launch: int) -> bytes:
        return self._key(f"tasks/progress/{launch}/")

    @property
    def autoscaler(self) -> bytes:
        """The driver's autoscaler: its recommendation, the inputs it used and its
        last decisions, for the operator's status and the CLI."""
        return self._key("autoscaler")

    @property
    def exchange(self) -> bytes:
        """Every launch's exchange addresses; a coordinator clears earlier launches'."""
        return self._key("tasks/exchange/")

    def exchange_of(self, launch: int) -> bytes:
        return self._key(f"tasks/exchange/{launch}/")

    @property
    def failures(self) -> bytes:
        """Per launch: the failure a task blamed on the job's code or input, so the
        driver can name it even when Spark reports another task's failure first."""
        return self._key("tasks/failure/")

    def failure_of(self, launch: int) -> bytes:
        return self._key(f"tasks/failure/{launch}")

    @property
    def rendezvous(self) -> bytes:
        """Every launch's meeting points of its tasks; a coordinator clears earlier launches'."""
        return self._key("tasks/rendezvous/")

    def rendezvous_of(self, launch: int, point: str) -> bytes:
        return self._key(f"tasks/rendezvous/{launch}/{quote(point, safe='')}/")

    @property
    def drained(self) -> bytes:
        """Bounded source subtasks that reached the end of their input."""
        return self._key("sources/drained/")

    def drained_of(self, vertex: str, subtask: int) -> bytes:
        return self._key(f"sources/drained/{vertex}/{subtask}")

    @property
    def trigger(self) -> bytes:
        return self._key("checkpoints/trigger")

    @property
    def acks(self) -> bytes:
        return self._key("checkpoints/acks/")

    def acks_of(self, checkpoint_id: int) -> bytes:
        return self._key(f"checkpoints/acks/{checkpoint_id}/")

    def ack(self, checkpoint_id: int, vertex: str, subtask: int) -> bytes:
        return self._key(f"checkpoints/acks/{checkpoint_id}/{vertex}/{subtask}")

    @staticmethod
    def parse_ack(key: bytes, prefix: bytes) -> tuple[int, str, int]:
        checkpoint_id, vertex, subtask = key[len(prefix) :].decode().split("/")
        return int(checkpoint_id), vertex, int(subtask)

    @property
    def completed(self) -> bytes:
        return self._key("checkpoints/completed/")

    def completed_of(self, checkpoint_id: int) -> bytes:
        return self._key(f"checkpoints/completed/{checkpoint_id}")

    @property
    def latest(self) -> bytes:
        return self._key("checkpoints/latest")

    @property
    def unusable(self) -> bytes:
        """Completed checkpoints found damaged, which no restore may use."""
        return self._key("checkpoints/unusable/")

    def unusable_of(self, checkpoint_id: int) -> bytes:
        return self._key(f"checkpoints/unusable/{checkpoint_id}")

    @property
    def savepoint_requests(self) -> bytes:
        return self._key("savepoints/requests/")

    def savepoint_request(self, request_id: str) -> bytes:
        return self._key(f"savepoints/requests/{check_name('savepoint request id', request_id)}")

    @property
    def savepoint_results(self) -> bytes:
        return self._key("savepoints/results/")

    def savepoint_result(self, request_id: str) -> bytes:
        return self._key(f"savepoints/results/{check_name('savepoint request id', request_id)}")

    @property
    def rescale_requests(self) -> bytes:
        return self._key("rescales/requests/")

    def rescale_request(self, request_id: str) -> bytes:
        return self._key(f"rescales/requests/{check_name('rescale request id', request_id)}")

    def rescale_result(self, request_id: str) -> bytes:
        return self._key(f"rescales/results/{check_name('rescale request id', request_id)}")
