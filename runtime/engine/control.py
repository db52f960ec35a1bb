"""A task's line to the coordinator: triggers and completions in, acknowledgements out.

Task threads are plain threads; the control plane (etcd, or the in-memory store)
is asyncio. This bridge runs the
participants' watches on an event loop in a daemon thread and hands triggers
and completions to the chain threads through queues.

A task belongs to one launch. It also watches the job's coordinator record:
once that record is gone (the launch's coordinator lost its lease) or names
another launch, the task is deposed and stops, instead of going on for a
coordinator that can no longer complete its checkpoints.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from lockgate.runtime.autoscaling.series import SubtaskLoad
from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.control_plane import ControlPlane, open_control_plane
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.participant import CheckpointParticipant
from lockgate.runtime.coordination.records import CompletedCheckpoint, CoordinatorRecord, Trigger, decode
from lockgate.runtime.snapshot.metadata import SubtaskState

log = logging.getLogger(__name__)

# How long a failing task waits to record its failure before raising it anyway.
RECORD_FAILURE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TaskProgress:
    """Records the task's sources read and its sinks wrote, since it started, and
    per chain its load counters (what the driver's autoscaler samples,
    `lockgate.runtime.autoscaling.samples`), taken at `at_ms`."""

    read: int
    written: int
    at_ms: int
    load: tuple[SubtaskLoad, ...] = ()


# The tasks of a barrier stage start together; one that has not published its
# address by then never will (its executor is gone), and Spark fails the stage.
GATHER_TIMEOUT_S = 300.0
RENDEZVOUS_TIMEOUT_S = 600.0
"""A task reaches a point of its start after its restore, so the slowest restore
of a launch sets the wait; a peer that fails fails the whole stage sooner."""


_Update = TypeVar("_Update")


async def _pump(updates: AsyncIterator[_Update], subscribers: list[queue.Queue[_Update]]) -> None:
    async for update in updates:
        for subscriber in subscribers:
            subscriber.put(update)


class AddressExchangeTimeoutError(TimeoutError):
    """Some tasks of a launch never published their exchange address."""


class RendezvousTimeoutError(TimeoutError):
    """Some tasks of the launch never reached a point every task must reach."""


class LaunchDeposedError(RuntimeError):
    """This task's launch no longer coordinates the job: it must stop."""


class CheckpointControl:
    def __init__(
        self,
        control_plane: ControlPlane,
        keys: JobKeys,
        subtask: int,
        launch: int,
        *,
        ack_key: bytes | None = None,
    ) -> None:
        self._ack_key = ack_key
        self.keys = keys
        self._subtask = subtask
        self.launch = launch
        # Why this task's launch was deposed; set once, read by every chain.
        self.deposed: str | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="control-plane")
        self._thread.start()
        self._store = open_control_plane(control_plane)
        self._call(self._store.connect())
        self._triggers: list[queue.Queue[Trigger]] = []
        self._completions: list[queue.Queue[CompletedCheckpoint]] = []
        self._watches: list[Future[None]] = []

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def start(self, from_revision: int | None = None) -> None:
        """Begin watching triggers and completions published from `from_revision` on
        (the coordinator's `trigger_revision`; default: from now)."""
        participant = self._participant("-")
        revision = from_revision or self._call(participant.start_revision())
        watches = (
            _pump(participant.triggers(revision), self._triggers),
            _pump(participant.completions(revision), self._completions),
            self._watch_coordinator(),
        )
        self._watches = [asyncio.run_coroutine_threadsafe(watch, self._loop) for watch in watches]

    def _participant(self, vertex: str) -> CheckpointParticipant:
        return CheckpointParticipant(
            self._store, self.keys, vertex, self._subtask, self.launch, ack_key=self._ack_key
        )

    async def _watch_coordinator(self) -> None:
        key = self.keys.coordinator
        rows, revision = await self._store.get_prefix_at(key)
        if self._depose_unless_ours(dict(rows).get(key)):
            return
        async for event in self._store.watch_prefix(key, revision + 1):
            if event.key == key and self._depose_unless_ours(None if event.deleted else event.value):
                return

    def _depose_unless_ours(self, record: bytes | None) -> bool:
        if record is None:
            self.deposed = (
                f"the coordinator of launch {self.launch} is gone (its lease expired or it stopped)"
            )
        elif (launch := decode(CoordinatorRecord, record).launch) != self.launch:
            self.deposed = f"launch {launch} has replaced launch {self.launch}"
        return self.deposed is not None

    def check_launch(self) -> None:
        """Raise if this task's launch was deposed (as the watch last heard)."""
        if self.deposed is not None:
            raise LaunchDeposedError(f"task {self._subtask} stops: {self.deposed}")

    def confirm_launch(self) -> None:
        """Raise unless this task's launch coordinates the job now: the coordinator
        record is read from the control plane at this moment (a linearizable read),
        not taken from the watch, whose news may be late. For what a sink must not
        do on behalf of a launch that a later one replaced (`SubtaskContext`)."""
        self._depose_unless_ours(self._call(self._store.get(self.keys.coordinator)))
        self.check_launch()

    def gather_addresses(
        self, address: str, parallelism: int, *, timeout_s: float = GATHER_TIMEOUT_S
    ) -> list[str]:
        """Publishes this task's exchange address under its launch and returns every
        task's, in task order, once all `parallelism` have published. (Spark's
        `allGather` would do, but waits for its answer in one-second sleeps: the
        first task to arrive lost up to a second of every launch.)"""
        prefix = self.keys.exchange_of(self.launch)
        found: dict[bytes, bytes] = {}
        try:
            self._call(within(self._gather(prefix, address, parallelism, found), timeout_s))
        except TimeoutError:
            missing = [i for i in range(parallelism) if prefix + str(i).encode() not in found]
            raise AddressExchangeTimeoutError(
                f"task {self._subtask} of launch {self.launch} waited {timeout_s:g} s for the "
                f"exchange addresses of tasks {missing} under {prefix.decode()}; their executors "
                "never started them (too few executor slots for the parallelism?) or lost them"
            ) from None
        try:
            return [found[prefix + str(i).encode()].decode() for i in range(parallelism)]
        except KeyError:
            raise RuntimeError(
                f"task {self._subtask} of launch {self.launch}: the exchange addresses under "
                f"{prefix.decode()} are {sorted(k.decode() for k in found)}, not tasks 0..{parallelism - 1}"
            ) from None

    def rendezvous(self, point: str, parallelism: int, *, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
        """Returns once all `parallelism` tasks of this launch have reached `point`:
        for a step of a task's start that must be done by every task before any
        goes on (a sink fencing its transactional ids before reading what they
        committed). A peer that fails first fails the stage, and this task with it."""
        prefix = self.keys.rendezvous_of(self.launch, point)
        found: dict[bytes, bytes] = {}
        try:
            self._call(within(self._gather(prefix, "", parallelism, found), timeout_s))
        except TimeoutError:
            missing = [i for i in range(parallelism) if prefix + str(i).encode() not in found]
            raise RendezvousTimeoutError(
                f"task {self._subtask} of launch {self.launch} waited {timeout_s:g} s at {point!r} for "
                f"tasks {missing}, which never got there"
            ) from None

    async def _gather(self, prefix: bytes, value: str, parallelism: int, found: dict[bytes, bytes]) -> None:
        """Publishes `value` as this task's under `prefix` and fills `found` with the
        launch's until it holds `parallelism`."""
        await self._store.put(prefix + str(self._subtask).encode(), value.encode())
        rows, revision = await self._store.get_prefix_at(prefix)
        found.update(rows)
        if len(found) < parallelism:
            async for event in self._store.watch_prefix(prefix, revision + 1):
                if not event.deleted:
                    found[event.key] = event.value
                if len(found) >= parallelism:
                    break

    def subscribe_triggers(self) -> queue.Queue[Trigger]:
        subscriber: queue.Queue[Trigger] = queue.Queue()
        self._triggers.append(subscriber)
        return subscriber

    def subscribe_completions(self) -> queue.Queue[CompletedCheckpoint]:
        subscriber: queue.Queue[CompletedCheckpoint] = queue.Queue()
        self._completions.append(subscriber)
        return subscriber

    def acknowledge(
        self, vertex: str, trigger: Trigger, state: SubtaskState, drained: bool = False, records: int = 0
    ) -> None:
        self._call(self._participant(vertex).acknowledge(trigger, state, drained, records))

    def decline(self, vertex: str, trigger: Trigger, reason: str) -> None:
        self._call(self._participant(vertex).decline(trigger, reason))

    def report_progress(self, progress: TaskProgress) -> None:
        self._call(
            self._store.put(
                self.keys.progress_of(self.launch, self._subtask), json.dumps(asdict(progress)).encode()
            )
        )

    def record_failure(self, text: str, *, timeout_s: float = RECORD_FAILURE_TIMEOUT_S) -> None:
        """Records under this launch the failure this task raises for the job's code or
        input (`job_failure.carried`). Spark reports one task's failure for the whole
        stage, often that of a peer whose exchange broke when this task died; the
        driver reads this record then. Best effort: without etcd, the task's own
        error still carries the failure."""
        try:
            self._call(within(self._store.put(self.keys.failure_of(self.launch), text.encode()), timeout_s))
        except Exception as error:  # noqa: BLE001 - the failure being raised matters more
            log.warning("task %s could not record its failure in etcd: %s", self._subtask, error)

    def report_drained(self, vertex: str) -> None:
        self._call(self._store.put(self.keys.drained_of(vertex, self._subtask), b"1"))

    def close(self) -> None:
        for watch in self._watches:
            watch.cancel()
        self._call(self._store.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
