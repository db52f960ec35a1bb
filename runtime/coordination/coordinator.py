"""The checkpoint coordinator (runs in the Spark driver).

Triggers checkpoints through etcd, collects the subtasks' acknowledgements,
writes `_metadata`, then completes the checkpoint in one etcd transaction
guarded by its leadership; aborts checkpoints that time out or are declined;
keeps the N most recent; takes savepoints on request. Timing follows Flink:
interval, timeout, minimum pause, maximum concurrent, tolerable failures.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from lockgate.runtime.clock import Clock, SystemClock
from lockgate.runtime.coordination.ack_seal import AckNotSealedError, unseal
from lockgate.runtime.coordination.cancellation import cancel_and_wait, within
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.errors import (
    CheckpointAbortedError,
    CoordinatorFencedError,
    JobFailedError,
)
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import (
    Compare,
    Delete,
    DeletePrefix,
    KeyValueStore,
    Operation,
    Put,
    ValueIs,
)
from lockgate.runtime.coordination.leadership import LEASE_TTL_S, Leadership
from lockgate.runtime.coordination.records import Ack, CompletedCheckpoint, Trigger, decode, encode
from lockgate.runtime.coordination.rescale_queue import InPlaceRescale, RescaleOrder, RescaleQueue
from lockgate.runtime.coordination.savepoint_queue import SavepointQueue
from lockgate.runtime.snapshot.metadata import (
    CheckpointMetadata,
    SnapshotKind,
    SubtaskState,
    VertexState,
    write_metadata,
)
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spec.model import Checkpointing

log = logging.getLogger(__name__)
_SPEC_DEFAULTS = Checkpointing()
# How long deleting once more what late uploads wrote for an aborted checkpoint may take.
DELETE_AGAIN_BOUND_S = 10.0

UNFINISHED_CLEANUP_IDS = 64
"""How many of the last allocated ids a starting coordinator checks for an earlier
launch's unfinished checkpoint: those in flight when it ended are the last few
(an abort deleted its own checkpoint's directory already)."""


@dataclass(frozen=True)
class CheckpointConfig:
    """The coordinator's settings: `spec.checkpointing`'s (its defaults are the spec's;
    `interval_s` None: checkpoints only when asked for)."""

    interval_s: float | None = _SPEC_DEFAULTS.interval_s
    timeout_s: float = _SPEC_DEFAULTS.timeout_s
    min_pause_s: float = _SPEC_DEFAULTS.min_pause_s
    max_concurrent: int = _SPEC_DEFAULTS.max_concurrent
    tolerable_failures: int = _SPEC_DEFAULTS.tolerable_failures
    retained: int = _SPEC_DEFAULTS.retained

    def __post_init__(self) -> None:
        if self.interval_s is not None and self.interval_s <= 0:
            raise ValueError(f"checkpoint interval must be positive, got {self.interval_s}")
        if self.timeout_s <= 0:
            raise ValueError(f"checkpoint timeout must be positive, got {self.timeout_s}")
        if self.min_pause_s < 0 or self.max_concurrent < 1 or self.tolerable_failures < 0:
            raise ValueError(
                "min_pause_s >= 0, max_concurrent >= 1 and tolerable_failures >= 0 are required, "
                f"got {self.min_pause_s}, {self.max_concurrent}, {self.tolerable_failures}"
            )
        if self.retained < 1:
            raise ValueError(f"retained must be at least 1, got {self.retained}")


@dataclass(frozen=True)
class JobPlan:
    """The subtasks that acknowledge every checkpoint: vertex -> parallelism."""

    vertices: dict[str, int]
    max_parallelism: int
    sources: frozenset[str] = frozenset()

    @property
    def subtasks(self) -> set[tuple[str, int]]:
        return {(v, i) for v, p in self.vertices.items() for i in range(p)}

    @property
    def source_subtasks(self) -> set[tuple[str, int]]:
        return {(v, i) for v in self.sources for i in range(self.vertices[v])}


class CheckpointListener(Protocol):
    """Told of every checkpoint's outcome (the driver's metrics)."""

    def completed(self, checkpoint: CompletedCheckpoint) -> None: ...

    def aborted(self, trigger: Trigger, reason: str) -> None: ...


@dataclass
class PendingCheckpoint:
    trigger: Trigger
    deadline: float
    done: asyncio.Future[CompletedCheckpoint]
    acks: dict[tuple[str, int], SubtaskState] = field(default_factory=dict)
    drained: set[tuple[str, int]] = field(default_factory=set)
    records: int = 0  # what the sinks took in its epoch, over every subtask
    status: Literal["pending", "completing", "finished"] = "pending"
    # Its trigger reached etcd, allocating its id: only then can anything exist
    # under that id for an abort to clean up.
    published: bool = False


def _retrieved(done: asyncio.Future[CompletedCheckpoint]) -> None:
    if not done.cancelled():
        done.exception()


class CheckpointCoordinator:
    def __init__(
        self,
        kv: KeyValueStore,
        keys: JobKeys,
        storage: CheckpointStorage,
        plan: JobPlan,
        config: CheckpointConfig,
        *,
        savepoint_dir: str | None = None,
        lease_ttl_s: int = LEASE_TTL_S,
        listener: CheckpointListener | None = None,
        snapshot_key: SnapshotKey | None = None,
        ack_key: bytes | None = None,
        clock: Clock | None = None,
        in_place_rescale: InPlaceRescale | None = None,
    ) -> None:
        # Every interval, deadline and timestamp is read from this clock: with a
        # ManualClock a test moves time and calls `tick()` instead of waiting.
        self._clock: Clock = clock or SystemClock()
        self._ack_key = ack_key  # acknowledgements without this run's seal are refused; None: unsealed
        self._kv = kv
        self._snapshot_key = snapshot_key  # signs every _metadata; None: unsigned (tests of other layers)
        self._listener = listener
        self.keys: Final = keys
        self._storage = storage
        self._plan = plan
        self.config = config
        self.leadership = Leadership(kv, keys, lease_ttl_s)
        self.store = CompletedCheckpointStore(kv, keys, storage, config.retained)
        self.savepoints = SavepointQueue(
            kv, keys, self.trigger, self._stop_with, savepoint_dir, guarded=self._guarded
        )
        # Rescale requests are served only where the job master can relaunch in place.
        self.rescales = (
            None
            if in_place_rescale is None
            else RescaleQueue(
                kv,
                keys,
                self.trigger,
                self._stop_for_rescale,
                prepare=in_place_rescale.prepare,
                parallelism=in_place_rescale.parallelism,
                guarded=self._guarded,
                clock=self._clock,
            )
        )
        self._enacting = None if in_place_rescale is None else in_place_rescale.enacting
        self.rescaling: RescaleOrder | None = None  # set when the tasks stopped for a rescale
        # Every subtask of the launch acknowledged a checkpoint: all of its tasks run.
        self.a_checkpoint_completed = asyncio.Event()
        self.pending: dict[int, PendingCheckpoint] = {}
        # Aborted after publishing: each one's directory, and the subtasks whose upload may
        # still write into it (a task uploads before it acknowledges, and learns of no abort).
        self._aborted: dict[int, tuple[str, set[tuple[str, int]]]] = {}
        self._next_id = 1
        self._last_allocated = 0
        self._latest_completed = 0
        self._consecutive_failures = 0
        self._last_completion = self._monotonic_s()
        self._last_trigger = self._monotonic_s()
        self._failure: str | None = None
        self.stopped_with: str | None = None
        # A bounded job's final checkpoint completed: nothing more to do.
        self.finished = False
        self._final_completed = False  # set as soon as it is known; `finished` once announced
        self.committed_records = 0  # what the sinks committed with this launch's checkpoints
        self._sources_drained = False
        # Every completed checkpoint, after its retention ran: for the driver's
        # status and metrics.
        self.completed: asyncio.Queue[CompletedCheckpoint] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._unpublished: asyncio.Queue[Trigger] = asyncio.Queue()
        self.trigger_revision = 0
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def next_checkpoint_id(self) -> int:
        return self._next_id

    @property
    def launch(self) -> int:
        """This launch's number: the fencing epoch every trigger, ack and completion carries."""
        return self.leadership.launch

    # -- life cycle ----------------------------------------------------------------

    async def start(self, wait_s: float = 0.0) -> None:
        """Take the job's leadership and pick up from the state etcd holds."""
        await self.leadership.acquire(wait_s)
        _, revision = await self._kv.get_prefix_at(self.keys.trigger)
        # Subtasks watch triggers from here, so none is missed by a task that
        # subscribes after this coordinator's first trigger.
        self.trigger_revision = revision + 1
        self._latest_completed = await self.store.latest_id() or 0
        # Ids are allocated by compare-and-swap on `last-id`; what etcd recorded
        # before that key existed counts too.
        allocated = await self._kv.get(self.keys.last_checkpoint_id)
        trigger = await self._kv.get(self.keys.trigger)
        last_triggered = decode(Trigger, trigger).checkpoint_id if trigger else 0
        self._last_allocated = max(int(allocated or 0), self._latest_completed, last_triggered)
        self._next_id = self._last_allocated + 1
        # Acks of an earlier coordinator belong to checkpoints nobody will complete,
        # sources restored by this run report being drained anew, and earlier
        # launches' exchange addresses name servers that are gone, their meeting
        # points are passed, and their tasks' failures were read when those launches ended.
        _, revision = await self._kv.get_prefix_at(self.keys.acks)
        if not await self._kv.transaction(
            [self.leadership.guard],
            [
                Put(self.keys.last_checkpoint_id, str(self._last_allocated).encode()),
                DeletePrefix(self.keys.acks),
                DeletePrefix(self.keys.drained),
                DeletePrefix(self.keys.exchange),
                DeletePrefix(self.keys.rendezvous),
                DeletePrefix(self.keys.failures),
            ],
        ):
            raise CoordinatorFencedError("the coordinator was replaced while it started")
        await self._delete_unfinished_of_earlier_launches()
        self._tasks = [
            asyncio.create_task(self._watch_acks(revision + 1), name="acks"),
            asyncio.create_task(self._watch_drained(revision + 1), name="drained"),
            asyncio.create_task(self._publish(), name="triggers"),
            asyncio.create_task(self.savepoints.run(), name="savepoints"),
        ]
        if self.rescales is not None:
            if self._enacting is not None:
                await self.rescales.answer(self._enacting)
            self._tasks.append(asyncio.create_task(self.rescales.run(), name="rescales"))
        for task in self._tasks:
            task.add_done_callback(lambda _: self._wake.set())

    def _checkpoint_url(self, n: int) -> str:
        return f"{self._storage.url.rstrip('/')}/{self.keys.job}/chk-{n}"

    async def _delete_unfinished_of_earlier_launches(self) -> None:
        """Checkpoints an earlier launch started and never completed (it failed, or was
        replaced, while they were in flight) leave what their uploads wrote; ids are
        never reused, so nothing would ever read or delete those directories. Savepoints
        with a target of their own are the user's to clean."""
        first = max(self._latest_completed + 1, self._last_allocated - UNFINISHED_CLEANUP_IDS + 1)
        for n in range(first, self._last_allocated + 1):
            if await self._kv.get(self.keys.completed_of(n)) is not None:
                continue  # completed, whatever `latest` names: kept
            target = CheckpointStorage(self._checkpoint_url(n))
            try:
                await within(asyncio.to_thread(target.delete, target.root, True), DELETE_AGAIN_BOUND_S)
            except Exception as error:  # noqa: BLE001 - files left behind are named, the job goes on
                log.warning("could not delete unfinished checkpoint %s of an earlier launch: %s", n, error)

    async def run(self) -> str | None:
        """Trigger periodic checkpoints until the job stops with a savepoint (its path
        is returned), a bounded job's final checkpoint completes (None), the job
        fails (`JobFailedError`) or this coordinator is fenced."""
        lost = asyncio.create_task(self.leadership.lost.wait())
        try:
            while True:
                await self.tick()
                if self.done:
                    return self.stopped_with
                self._wake.clear()
                waiter = asyncio.create_task(self._wake.wait())
                await asyncio.wait({waiter, lost}, timeout=self._sleep_s(), return_when="FIRST_COMPLETED")
                waiter.cancel()
        finally:
            lost.cancel()

    @property
    def done(self) -> bool:
        """The launch is over: stopped with a savepoint or for a rescale, or a bounded
        job finished."""
        return self.stopped_with is not None or self.rescaling is not None or self.finished

    async def tick(self) -> None:
        """One round of the coordinator's decisions at its clock's time: raise if the
        job failed or this coordinator was fenced; abort checkpoints past their
        deadline; trigger one if the interval, pause and concurrency allow. `run()`
        ticks whenever something happens or a deadline comes."""
        if self.leadership.lost.is_set():
            raise CoordinatorFencedError("this coordinator was replaced, or no heartbeat reached etcd")
        if self._failure is not None:
            raise JobFailedError(self._failure)
        self._raise_if_crashed()
        if self.done:
            return
        await self._abort_expired()
        if self._periodic_due():
            # Nobody awaits a periodic checkpoint: its abort is reported by `_abort`'s
            # warning, not again by asyncio as an exception never retrieved.
            self.trigger().add_done_callback(_retrieved)

    def _monotonic_s(self) -> float:
        return self._clock.monotonic_ms() / 1000

    def _raise_if_crashed(self) -> None:
        """A dead watcher or publisher would leave the job waiting for checkpoints forever."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise JobFailedError(f"the coordinator's {task.get_name()} loop failed: {error!r}") from error

    async def close(self, release: bool = True) -> None:
        """Stop the coordinator's loops and give up the job, each within a bound: a
        driver whose clean-up hangs would go on holding the lease and beating
        `running`, so neither the operator nor a successor could act."""
        await cancel_and_wait(self._tasks, "closing the checkpoint coordinator")
        await self._delete_aborted_again(list(self._aborted))
        if release:
            await self.leadership.release()
        else:
            self.leadership.abandon()

    # -- triggering ----------------------------------------------------------------

    def _periodic_due(self) -> bool:
        if self._final_completed:
            return False
        checkpoints = [p for p in self.pending.values() if p.trigger.kind == "checkpoint"]
        if self._sources_drained and not checkpoints:
            return True  # the final checkpoint of a bounded job: no reason to wait
        interval = self.config.interval_s
        if interval is None or len(checkpoints) >= self.config.max_concurrent:
            return False
        now = self._monotonic_s()
        return now - self._last_completion >= self.config.min_pause_s and now - self._last_trigger >= interval

    def _sleep_s(self) -> float:
        now = self._monotonic_s()
        wakeups = [p.deadline - now for p in self.pending.values()]
        if self.config.interval_s is not None:
            wakeups.append(self._last_trigger + self.config.interval_s - now)
            wakeups.append(self._last_completion + self.config.min_pause_s - now)
        return max(0.001, min(wakeups, default=3600.0))

    def _stop_for_rescale(self, order: RescaleOrder) -> None:
        self.rescaling = order
        self._wake.set()

    def _stop_with(self, savepoint_path: str) -> None:
        self.stopped_with = savepoint_path
        self._wake.set()

    def trigger(
        self, kind: SnapshotKind = "checkpoint", target: str | None = None, stop: bool = False
    ) -> asyncio.Future[CompletedCheckpoint]:
        """Start checkpoint (or savepoint into `target`) number next; its future
        resolves on completion or fails with the reason it was aborted."""
        n = self._next_id
        self._next_id += 1
        self._last_trigger = self._monotonic_s()
        if target is None:
            target = self._checkpoint_url(n)
        trigger = Trigger(n, self.launch, kind, target, self._clock.now_ms(), stop)
        done = asyncio.get_running_loop().create_future()
        self.pending[n] = PendingCheckpoint(trigger, self._monotonic_s() + self.config.timeout_s, done)
        self._unpublished.put_nowait(trigger)
        return done

    async def _publish(self) -> None:
        """Write triggers one at a time, in id order: subtasks see every one, in order.
        Publishing allocates the id: the same transaction moves `last-id` up from the
        last id this coordinator allocated, so no two launches ever share an id."""
        while True:
            trigger = await self._unpublished.get()
            n = trigger.checkpoint_id
            pending = self.pending.get(n)
            if pending is None:
                continue  # aborted before it was published
            last = self.keys.last_checkpoint_id
            if not await self._guarded(
                [Put(self.keys.trigger, encode(trigger)), Put(last, str(n).encode())],
                ValueIs(last, str(self._last_allocated).encode()),
            ):
                await self._abort(n, "this coordinator was replaced")
                continue
            self._last_allocated = n
            pending.published = True

    # -- acknowledgements ----------------------------------------------------------

    async def _watch_acks(self, start_revision: int) -> None:
        async for event in self._kv.watch_prefix(self.keys.acks, start_revision):
            if event.deleted:
                continue
            n, vertex, subtask = JobKeys.parse_ack(event.key, self.keys.acks)
            if n in self._aborted:
                await self._guarded([Delete(event.key)])
                await self._late_upload(n, (vertex, subtask))
                continue
            if n not in self.pending:
                # Late, of a checkpoint this launch never triggered (ids are never reused):
                # an earlier launch's task, sealed with that launch's key, not a forgery.
                log.info("ignoring an acknowledgement of checkpoint %s, which this launch did not trigger", n)
                await self._guarded([Delete(event.key)])
                continue
            try:
                record = (
                    event.value if self._ack_key is None else unseal(self._ack_key, event.key, event.value)
                )
            except AckNotSealedError as error:
                log.error(
                    "refused an acknowledgement of checkpoint %s for %s/%s: %s; this run's tasks seal "
                    "theirs, so something else wrote it to etcd: restrict who can write the job's keys",
                    n, vertex, subtask, error,
                )  # fmt: skip
                await self._guarded([Delete(event.key)])
                await self._abort(n, f"an acknowledgement for {vertex}/{subtask} is not this run's")
                continue
            ack = decode(Ack, record)
            pending = self.pending.get(n)
            if ack.launch != self.launch:
                log.warning(
                    "refused an acknowledgement of checkpoint %s by %s/%s of launch %s (this is launch %s)",
                    n, vertex, subtask, ack.launch, self.launch,
                )  # fmt: skip
                await self._guarded([Delete(event.key)])
                continue
            if pending is None or pending.status != "pending":
                log.info("ignoring a late acknowledgement of checkpoint %s", n)
                await self._guarded([Delete(event.key)])
                continue
            if ack.declined is not None:
                await self._abort(n, f"{vertex}/{subtask} declined: {ack.declined}")
                continue
            assert ack.state is not None
            pending.acks[(vertex, subtask)] = ack.state
            pending.records += ack.records
            if ack.drained:
                pending.drained.add((vertex, subtask))
            if set(pending.acks) >= self._plan.subtasks:
                await self._complete(pending)

    async def _watch_drained(self, start_revision: int) -> None:
        """When every source is drained, checkpoint at once instead of at the next
        interval: that checkpoint is the bounded job's final one."""
        drained: set[tuple[str, int]] = set()
        async for event in self._kv.watch_prefix(self.keys.drained, start_revision):
            if event.deleted:
                continue
            vertex, subtask = event.key[len(self.keys.drained) :].decode().rsplit("/", 1)
            drained.add((vertex, int(subtask)))
            if drained >= self._plan.source_subtasks:
                self._sources_drained = True
                self._wake.set()

    async def _complete(self, pending: PendingCheckpoint) -> None:
        pending.status = "completing"
        trigger = pending.trigger
        n = trigger.checkpoint_id
        target = CheckpointStorage(trigger.target)
        metadata = CheckpointMetadata(
            job_id=self.keys.job,
            namespace=self.keys.namespace,
            checkpoint_id=n,
            kind=trigger.kind,
            timestamp_ms=trigger.timestamp_ms,
            vertices={
                vertex: VertexState(
                    parallelism,
                    self._plan.max_parallelism,
                    tuple(pending.acks[(vertex, i)] for i in range(parallelism)),
                )
                for vertex, parallelism in self._plan.vertices.items()
            },
        )
        try:
            key = self._snapshot_key
            digest = await asyncio.to_thread(write_metadata, target, target.root, metadata, key)
        except OSError as error:
            await self._abort(n, f"writing its _metadata failed: {error}")
            return
        summary = CompletedCheckpoint(
            checkpoint_id=n,
            kind=trigger.kind,
            path=trigger.target,
            parallelism=dict(self._plan.vertices),
            max_parallelism=self._plan.max_parallelism,
            bytes=metadata.state_bytes,
            trigger_ms=trigger.timestamp_ms,
            completed_ms=self._clock.now_ms(),
            final=bool(self._plan.sources) and pending.drained >= self._plan.source_subtasks,
            launch=self.launch,
            records=pending.records,
            metadata_sha256=digest,
        )
        if not await self._guarded(self.store.completion_ops(summary, newest=n > self._latest_completed)):
            await asyncio.to_thread(target.delete, f"{target.root}/_metadata")
            await self._abort(n, "this coordinator was replaced")
            self._wake.set()
            return
        pending.status = "finished"
        del self.pending[n]
        # Before the next await: a tick in between would see the sources drained and
        # nothing pending, and trigger a checkpoint after the final one, which never
        # completes (a source that pre-committed at it would wait for it forever).
        self._final_completed = self._final_completed or summary.final
        self.committed_records += summary.records
        self._latest_completed = max(self._latest_completed, n)
        self._consecutive_failures = 0
        self._last_completion = self._monotonic_s()
        in_flight = sum(state.channel.records for state in pending.acks.values() if state.channel is not None)
        if in_flight:
            log.info(
                "checkpoint %s complete: %s bytes, %s records in flight (unaligned)",
                n,
                summary.bytes,
                in_flight,
            )
        else:
            log.info("checkpoint %s complete: %s bytes", n, summary.bytes)
        await self._subsume_older_than(n)
        try:
            await self.store.discard_old(set(self.pending), self.leadership.guard)
        except CoordinatorFencedError:
            self.leadership.lost.set()
        except Exception:
            log.exception("discarding old checkpoints failed; the next completion retries")
        pending.done.set_result(summary)
        self.a_checkpoint_completed.set()
        self.completed.put_nowait(summary)
        if self._listener is not None:
            self._listener.completed(summary)
        self.finished = self.finished or summary.final
        self._wake.set()

    # -- failures ------------------------------------------------------------------

    async def _guarded(self, operations: list[Operation], *also: Compare) -> bool:
        """Write only while this coordinator leads (and `also` holds); a failed guard fences it."""
        if await self._kv.transaction([self.leadership.guard, *also], operations):
            return True
        self.leadership.lost.set()
        return False

    async def _abort_expired(self) -> None:
        now = self._monotonic_s()
        for n, pending in list(self.pending.items()):
            if pending.status == "pending" and pending.deadline <= now:
                await self._abort(n, f"timed out after {self.config.timeout_s} s")

    async def _subsume_older_than(self, n: int) -> None:
        """A completed checkpoint makes every older pending checkpoint useless (as in
        Flink): none of them may complete after it and become `latest`. Savepoints
        go on: the user asked for them."""
        for older, pending in list(self.pending.items()):
            if older < n and pending.trigger.kind == "checkpoint" and pending.status == "pending":
                await self._abort(older, f"subsumed by checkpoint {n}", failure=False)

    async def _late_upload(self, n: int, subtask: tuple[str, int]) -> None:
        """A subtask acknowledged (or declined) aborted checkpoint `n`: its upload wrote
        into the directory the abort deleted, so it is deleted again."""
        _, waiting = self._aborted[n]
        waiting.discard(subtask)
        await self._delete_aborted_again([n])
        if not waiting:
            del self._aborted[n]

    async def _delete_aborted_again(self, ids: list[int]) -> None:
        for n in ids:
            target = CheckpointStorage(self._aborted[n][0])
            try:
                await within(asyncio.to_thread(target.delete, target.root, True), DELETE_AGAIN_BOUND_S)
            except Exception as error:  # noqa: BLE001 - files left behind are named, the job goes on
                log.warning(
                    "could not delete what late uploads wrote for aborted checkpoint %s: %s", n, error
                )

    async def _abort(self, n: int, reason: str, *, failure: bool = True) -> None:
        pending = self.pending.get(n)
        if pending is None or pending.status == "finished":
            return
        pending.status = "finished"
        del self.pending[n]
        trigger = pending.trigger
        log.warning("%s %s aborted: %s", trigger.kind, n, reason)
        if pending.published:
            # Its id and directory were allocated to this launch alone: the files are
            # its own tasks'. The acks go only while this coordinator still leads.
            await self._guarded([DeletePrefix(self.keys.acks_of(n))])
            target = CheckpointStorage(trigger.target)
            waiting = self._plan.subtasks - set(pending.acks)
            deleted = True
            try:
                await asyncio.to_thread(target.delete, target.root, True)
            except OSError as error:  # a late upload writing into it meanwhile: deleted again later
                log.warning("aborted checkpoint %s: its files are deleted again later (%s)", n, error)
                deleted = False
            if waiting or not deleted:
                self._aborted[n] = (trigger.target, set(waiting))
        pending.done.set_exception(CheckpointAbortedError(n, reason))
        if self._listener is not None:
            self._listener.aborted(trigger, reason)
        if trigger.kind == "checkpoint" and failure:
            self._consecutive_failures += 1
            if self._consecutive_failures > self.config.tolerable_failures:
                self._failure = (
                    f"{self._consecutive_failures} consecutive checkpoints failed (tolerable: "
                    f"{self.config.tolerable_failures}); the last: checkpoint {n} {reason}"
                )
        self._wake.set()
