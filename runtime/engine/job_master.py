"""The job master: one run of a job, its tasks launched by a `Stage` beside the
checkpoint coordinator, restored from a savepoint or the latest checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.restore_point import RestorePoint, resolve_restore_point
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.supervision import run_beside_coordinator
from lockgate.runtime.snapshot.storage import CheckpointStorage


class Stage(Protocol):
    """Runs all P tasks of a launch at once (a Spark barrier stage)."""

    def run(self, spec: JobSpec) -> None:
        """Blocks until every task ended; raises if one failed."""
        ...

    def cancel(self) -> None:
        """Tear the running tasks down (from another thread)."""
        ...


EarlierCheckpoints = Literal["resume", "refuse", "discard"]
"""What a run does when the job id already has completed checkpoints: restore from
the latest (a restart, the operator's last-state upgrade), refuse to start (a new
`lockgate run`), or delete them and start from empty state (`--fresh`)."""


class EarlierRunError(RuntimeError):
    """The job id has checkpoints of an earlier run and nobody said what to do with them."""


class MaxParallelismMismatchError(ValueError):
    """State is split into key groups by max parallelism: it can never change."""


@dataclass(frozen=True)
class RunResult:
    restored_from: str | None
    savepoint: str | None
    """Set when the run ended by a stop-with-savepoint."""


def check_restorable(restore: RestorePoint, spec: JobSpec) -> None:
    for name, vertex in restore.metadata.vertices.items():
        if vertex.max_parallelism != spec.state.max_parallelism:
            raise MaxParallelismMismatchError(
                f"{restore.url} was taken with max parallelism {vertex.max_parallelism} (vertex {name!r}); "
                f"this run has {spec.state.max_parallelism}. Run with --max-parallelism "
                f"{vertex.max_parallelism}: it is fixed for the life of a job's state."
            )


async def run_once(
    spec: JobSpec,
    stage: Stage,
    storage: CheckpointStorage,
    config: CheckpointConfig,
    *,
    savepoint_dir: str | None = None,
    from_savepoint: str | None = None,
    earlier_checkpoints: EarlierCheckpoints = "resume",
) -> RunResult:
    graph = spec.graph()  # imported and validated here before any task starts
    plan = job_plan(graph, spec.parallelism, spec.state.max_parallelism)
    async with Etcd(spec.etcd) as etcd:
        coordinator = CheckpointCoordinator(
            etcd, spec.keys, storage, plan, config, savepoint_dir=savepoint_dir
        )
        await coordinator.start()
        try:
            if from_savepoint is None and earlier_checkpoints != "resume":
                await _handle_earlier_checkpoints(coordinator, earlier_checkpoints)
            restore = await resolve_restore_point(coordinator.store, from_savepoint)
            if restore is not None:
                check_restorable(restore, spec)
            launch = spec.launch(restore, coordinator.trigger_revision)
            savepoint = await run_beside_coordinator(coordinator, lambda: stage.run(launch), stage.cancel)
        finally:
            await coordinator.close()
    return RunResult(None if restore is None else restore.url, savepoint)


async def _handle_earlier_checkpoints(coordinator: CheckpointCoordinator, policy: EarlierCheckpoints) -> None:
    completed = await coordinator.store.all()
    if not completed:
        return
    if policy == "discard":
        await coordinator.store.discard_all()
        return
    latest, keys = completed[-1], coordinator.keys
    raise EarlierRunError(
        f"job {keys.namespace}/{keys.job} has {len(completed)} completed checkpoint(s) "
        f"of an earlier run (latest: {latest.path}). Resume from it with --from-savepoint {latest.path}, "
        "start over from empty state with --fresh (deletes them), or choose another --job-id."
    )
