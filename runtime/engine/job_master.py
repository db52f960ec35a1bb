"""The job master: one run of a job, its tasks launched by a `Stage` beside the
checkpoint coordinator, restored from a savepoint or the latest checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from lockgate.runtime.coordination.ack_seal import ack_key
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.control_plane import open_control_plane
from lockgate.runtime.coordination.coordinator import (
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointListener,
)
from lockgate.runtime.coordination.rescale_queue import (
    RESERVE_TIMEOUT_S,
    InPlaceRescale,
    RescaleOrder,
    RescaleRefusedError,
)
from lockgate.runtime.coordination.restore_point import (
    UNCHECKED,
    RestorePoint,
    Trust,
    resolve_relaunch_point,
    resolve_restore_point,
)
from lockgate.runtime.coordination.unusable import UnusableCheckpoints
from lockgate.runtime.engine.job_failure import failure_traceback_text
from lockgate.runtime.engine.job_spec import JobSpec, new_launch_secret
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.restart import RestartHistory, RestartStrategy, decide
from lockgate.runtime.engine.restore_check import (
    check_restorable,
)
from lockgate.runtime.engine.supervision import run_beside_coordinator
from lockgate.runtime.failure_class import FailureClass, classify
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

log = logging.getLogger(__name__)


class Stage(Protocol):
    """Runs all P tasks of a launch at once (a Spark barrier stage)."""

    def run(self, spec: JobSpec) -> None:
        """Blocks until every task ended; raises if one failed."""
        ...

    def cancel(self) -> None:
        """Tear the running tasks down (from another thread)."""
        ...

    @property
    def stop_wait_s(self) -> float | None:
        """How long cancelled tasks may take to stop before they are left behind
        (None: as long as they take)."""
        ...

    def reserve(self, parallelism: int, timeout_s: float) -> None:
        """Make sure a launch of `parallelism` tasks can start, while the running one
        goes on (a rescale's "make before break": Spark's executors for it registered);
        raises if that cannot be had within `timeout_s`."""
        ...

    def release_surplus(self, parallelism: int) -> None:
        """Give back what a launch of `parallelism` tasks does not need (after a
        rescale's new launch runs): idle executors only."""
        ...


EarlierCheckpoints = Literal["resume", "require", "refuse", "discard"]
"""What a run does when the job id already has completed checkpoints: restore from
the latest (a restart, the operator's last-state upgrade), the same but refusing to
start without one (`lockgate run --resume`), refuse to start (a new `lockgate run`),
or delete them and start from empty state (`--fresh`)."""


class EarlierRunError(RuntimeError):
    """The job id has checkpoints of an earlier run and nobody said what to do with
    them, or a run asked to resume has none."""

    failure_class = FailureClass.DEFINITION


@dataclass(frozen=True)
class RunResult:
    restored_from: str | None
    """What the first launch restored (None: empty state)."""
    savepoint: str | None
    """Set when the run ended by a stop-with-savepoint."""
    restarts: int = 0
    committed_records: int = 0
    """Records the sinks committed with the run's checkpoints, over all its launches:
    its output (twice where a fallback wrote an epoch again)."""


class JobListener(CheckpointListener, Protocol):
    """Told of every checkpoint's outcome and of every restart (the driver's metrics)."""

    def restarted(self) -> None: ...


class JobGaveUpError(RuntimeError):
    """The restart strategy gave up; the message holds the last failure, whose class
    and traceback it carries."""

    def __init__(self, message: str, last: BaseException, job_traceback: str | None) -> None:
        super().__init__(message)
        self.failure_class = classify(last)
        self.job_traceback = job_traceback


def ends_the_job(failure: BaseException) -> bool:
    """Whether `failure`, raised by `JobMaster.run`, is the job's end: a permanent
    failure, or one the restart strategy gave up on. Any other (etcd out of reach
    while a damaged checkpoint was set aside) ended the run, not the job."""
    return isinstance(failure, JobGaveUpError) or classify(failure).permanent


class JobMaster:
    """Runs a job to its end: launches its tasks beside a coordinator and, when a
    launch fails, relaunches them by the restart strategy from the newest intact
    checkpoint (of this run and after, when it began from a savepoint)."""

    def __init__(
        self,
        spec: JobSpec,
        stage: Stage,
        storage: CheckpointStorage,
        config: CheckpointConfig,
        *,
        savepoint_dir: str | None = None,
        listener: JobListener | None = None,
        takeover_wait_s: float = 0.0,
        allow_non_restored_state: bool = False,
        accept_duplicate_output: bool = False,
        trust: Trust = UNCHECKED,
    ) -> None:
        self.spec = spec
        # Restore a checkpoint older than the newest completed one (lost, damaged or
        # replaced), writing again the output committed after it.
        self._accept_duplicates = accept_duplicate_output
        # Which snapshots it signs and restores: the job's key, and a savepoint the user vouched for.
        self._trust = trust
        # Restore although some state of the snapshot belongs to no vertex (dropping it).
        self._allow_non_restored_state = allow_non_restored_state
        # How long a launch waits for an earlier driver's coordinator to let go.
        self._takeover_wait_s = takeover_wait_s
        self._listener = listener
        self._stage = stage
        self._storage = storage
        self._config = config
        self._savepoint_dir = savepoint_dir
        self.restarts = 0
        self.committed_records = 0
        self._launched = False
        self._first_restore: RestorePoint | None = None
        self._first_id = 0
        self._restored: RestorePoint | None = None  # by the current launch
        self._enacting: RescaleOrder | None = None  # the rescale the next launch enacts
        self._running: tuple[int, int] | None = None
        self.first_launch = 0  # the launch number of this run's first launch, once it has one
        self.reserve_timeout_s = RESERVE_TIMEOUT_S

    @property
    def running(self) -> tuple[int, int] | None:
        """(launch number, parallelism) of the launch whose tasks run now; None
        between launches (what the autoscaler samples)."""
        return self._running

    @property
    def restored_from(self) -> str | None:
        """What the current launch restored (None: empty state, or not launched yet)."""
        return None if self._restored is None else self._restored.url

    async def run(
        self,
        strategy: RestartStrategy,
        *,
        from_savepoint: str | None = None,
        earlier_checkpoints: EarlierCheckpoints = "resume",
        coordinating: Callable[[], Awaitable[None]] | None = None,
    ) -> RunResult:
        """`coordinating` is awaited each time a launch holds the job's coordinator,
        before its tasks start (the driver's status heartbeat begins there)."""
        history = RestartHistory()
        while True:
            self._restored = None
            try:
                savepoint, rescale = await self._launch(from_savepoint, earlier_checkpoints, coordinating)
            except Exception as failure:
                set_aside = await self._set_aside_damaged_restore(failure, from_savepoint)
                # A permanent failure (`failure_class.py`) ends the run at once. A launch
                # fenced because its lease lapsed (etcd out of reach for longer) is
                # transient: the relaunch takes the job with a new launch number.
                if classify(failure).permanent and not set_aside:
                    raise
                decision = decide(strategy, history, time.monotonic())
                history, delay = decision.history, decision.delay_s
                if delay is None:
                    raise JobGaveUpError(
                        f"gave up after {self.restarts} restart(s) ({strategy.describe()}); "
                        f"last failure: {type(failure).__name__}: {failure}",
                        failure,
                        failure_traceback_text(failure, self.spec.entrypoint),
                    ) from failure
                self.restarts += 1
                if self._listener is not None:
                    self._listener.restarted()
                first_line = next(iter(str(failure).splitlines()), "")
                log.warning("job failed (%s); restart %s in %.1f s", first_line, self.restarts, delay)
                await asyncio.sleep(delay)  # the strategy's delay, nothing to wait for
                continue
            if rescale is not None:
                # Not a restart: the tasks stopped at a checkpoint on request.
                self.spec = dataclasses.replace(self.spec, parallelism=rescale.parallelism)
                self._enacting = rescale
                continue
            restored = None if self._first_restore is None else self._first_restore.url
            return RunResult(restored, savepoint, self.restarts, self.committed_records)

    async def _launch(
        self,
        from_savepoint: str | None,
        earlier: EarlierCheckpoints,
        coordinating: Callable[[], Awaitable[None]] | None,
    ) -> tuple[str | None, RescaleOrder | None]:
        """Runs one launch to its end: the savepoint it stopped with, or the rescale
        it stopped for."""
        graph = self.spec.graph()  # imported and validated here before any task starts
        plan = job_plan(graph, self.spec.parallelism, self.spec.state.max_parallelism)
        secret = new_launch_secret()  # the tasks' and the coordinator's alone: it never goes to etcd
        async with open_control_plane(self.spec.control_plane) as store:
            coordinator = CheckpointCoordinator(
                store,
                self.spec.keys,
                self._storage,
                plan,
                self._config,
                savepoint_dir=self._savepoint_dir,
                listener=self._listener,
                snapshot_key=self._trust.key,
                ack_key=ack_key(secret),
                in_place_rescale=InPlaceRescale(self.spec.parallelism, self._prepare_rescale, self._enacting),
            )
            await coordinator.start(self._takeover_wait_s)
            released = None
            if self._enacting is not None:  # answered by `start`
                released = asyncio.create_task(self._release_surplus(coordinator), name="release-surplus")
                self._enacting = None
            try:
                if coordinating is not None:
                    await coordinating()
                restore = await self._restore_point(coordinator, from_savepoint, earlier)
                if restore is not None:
                    check_restorable(
                        restore.url,
                        restore.metadata,
                        graph,
                        self.spec.state.max_parallelism,
                        allow_non_restored_state=self._allow_non_restored_state,
                    )
                    in_flight = restore.records_in_flight
                    log.info(
                        "launch %s at parallelism %s restores %s%s",
                        coordinator.launch,
                        self.spec.parallelism,
                        restore.name,
                        f", replaying {in_flight} records in flight (unaligned) before new input"
                        if in_flight
                        else "",
                    )
                launch = self.spec.for_launch(
                    coordinator.launch, restore, coordinator.trigger_revision, secret
                )
                self._running = (coordinator.launch, self.spec.parallelism)
                savepoint = await run_beside_coordinator(
                    coordinator, lambda: self._stage.run(launch), self._stage.cancel, self._stage.stop_wait_s
                )
                return savepoint, coordinator.rescaling
            finally:
                self._running = None
                if released is not None:
                    await cancel_and_wait([released], "releasing surplus executors")
                self.committed_records += coordinator.committed_records
                await coordinator.close()

    async def _prepare_rescale(self, parallelism: int) -> None:
        """Whether the job can run at `parallelism` (RescaleRefusedError naming why
        not), with what that needs reserved while the current launch runs on."""
        max_parallelism = self.spec.state.max_parallelism
        if parallelism > max_parallelism:
            raise RescaleRefusedError(
                f"parallelism {parallelism} is above the job's maxParallelism {max_parallelism} (its "
                f"state is split into {max_parallelism} key groups): ask for at most {max_parallelism}"
            )
        try:
            job_plan(self.spec.graph(), parallelism, max_parallelism)
        except ValueError as error:
            raise RescaleRefusedError(f"the job cannot run at parallelism {parallelism}: {error}") from None
        try:
            await asyncio.to_thread(self._stage.reserve, parallelism, self.reserve_timeout_s)
        except Exception as error:
            raise RescaleRefusedError(str(error)) from error

    async def _release_surplus(self, coordinator: CheckpointCoordinator) -> None:
        """Once every task of a rescaled launch runs (a checkpoint completed), the
        executors it does not need go back."""
        await coordinator.a_checkpoint_completed.wait()
        try:
            await asyncio.to_thread(self._stage.release_surplus, self.spec.parallelism)
        except Exception:
            log.exception("could not release executors parallelism %s does not need", self.spec.parallelism)

    async def _restore_point(
        self, coordinator: CheckpointCoordinator, from_savepoint: str | None, earlier: EarlierCheckpoints
    ) -> RestorePoint | None:
        store = coordinator.store
        if not self._launched:
            if from_savepoint is None and earlier in ("refuse", "discard"):
                await _handle_earlier_checkpoints(coordinator, earlier)
            self._restored = self._first_restore = await resolve_restore_point(
                store, from_savepoint, self._trust, accept_duplicates=self._accept_duplicates
            )
            if earlier == "require" and self._restored is None:
                keys = coordinator.keys
                raise EarlierRunError(
                    f"job {keys.namespace}/{keys.job} has no completed checkpoint to resume from; "
                    "run it without --resume to start from empty state"
                )
            self._first_id = coordinator.next_checkpoint_id
            self.first_launch = coordinator.launch
            self._launched = True
        elif from_savepoint is None:
            self._restored = await resolve_restore_point(
                store, trust=self._trust, accept_duplicates=self._accept_duplicates
            )
        else:
            self._restored = await resolve_relaunch_point(
                store, self._first_id, from_savepoint, self._trust, accept_duplicates=self._accept_duplicates
            )
        return self._restored

    async def _set_aside_damaged_restore(self, failure: BaseException, from_savepoint: str | None) -> bool:
        """When `failure` is a task finding a file of the checkpoint this launch restored
        damaged, mark that checkpoint unusable, so that the next launch restores the one
        before it instead of failing on it again. A savepoint the user named has no
        stand-in: its damage ends the run."""
        restored = self._restored
        damage = None if restored is None else restored.damage_named_in(failure)
        if restored is None or damage is None:
            return False
        path, problem = damage
        if restored.url == from_savepoint:
            raise SnapshotCorruptError(path, f"{problem} (found by a task restoring it)") from failure
        checkpoint_id = restored.metadata.checkpoint_id
        async with open_control_plane(self.spec.control_plane) as store:
            await UnusableCheckpoints(store, self.spec.keys).mark(
                checkpoint_id, restored.url, f"a task found {SnapshotCorruptError.naming(path)}{problem}"
            )
        log.error(
            "a task found checkpoint %s damaged (%s: %s); it is marked unusable, and the next "
            "launch restores the newest intact checkpoint before it (if the output it committed "
            "may be written again)",
            checkpoint_id,
            path,
            problem,
        )
        return True


async def _handle_earlier_checkpoints(coordinator: CheckpointCoordinator, policy: EarlierCheckpoints) -> None:
    if policy == "discard":
        if await coordinator.store.all():
            await coordinator.store.discard_all(coordinator.leadership.guard)
        return
    await refuse_an_earlier_run(coordinator.store)


async def refuse_an_earlier_run(store: CompletedCheckpointStore) -> None:
    """Raises EarlierRunError when the job id has completed checkpoints of an earlier
    run: `lockgate run` asks before Spark's JVM starts, the job master again once it
    coordinates (another run may have written some since)."""
    completed = await store.all()
    if not completed:
        return
    latest, keys = completed[-1], store.keys
    raise EarlierRunError(
        f"job {keys.namespace}/{keys.job} has {len(completed)} completed checkpoint(s) "
        f"of an earlier run (latest: {latest.path}). Resume from it with --resume (or from another with "
        f"--from-savepoint PATH), start over from empty state with --fresh (deletes them), or choose "
        "another --job-id."
    )
