"""Runs a job graph in-process against a real etcd, beside a real coordinator; and
`InProcessStage`, with which a `JobMaster` (the driver's) runs its launches in-process."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.restore_point import resolve_restore_point
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.local_runner import run_local
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.supervision import run_beside_coordinator
from lockgate.runtime.engine.task import TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

M = 32


@dataclass(frozen=True)
class Run:
    parallelism: int
    backend: Literal["heap", "rocksdb"] = "rocksdb"
    exchange: Literal["memory", "tcp"] = "memory"
    interval_s: float = 0.1
    batch_size: int = 64
    channel_capacity: int = 16
    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"


async def run_job(etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path, graph: JobGraph, run: Run) -> int:
    """Run to the end, restoring from the latest checkpoint if there is one;
    returns the id restored from (0: none)."""
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    async with Etcd(etcd_config) as etcd:
        config = CheckpointConfig(interval_s=run.interval_s, timeout_s=30, retained=2)
        plan = job_plan(graph, run.parallelism, M)
        coordinator = CheckpointCoordinator(etcd, keys, storage, plan, config)
        await coordinator.start()
        restore = await resolve_restore_point(coordinator.store)
        state = StateConfig(run.backend, tmp_path / "local", M)
        configs = [
            TaskConfig(i, run.parallelism, state, mode=run.mode, bounded=True, batch_size=run.batch_size)
            for i in range(run.parallelism)
        ]
        cancelled = threading.Event()

        def run_tasks() -> None:
            run_local(
                graph,
                configs,
                lambda i: CheckpointControl(etcd_config, keys, i, coordinator.launch),
                restore,
                channel_capacity=run.channel_capacity,
                trigger_revision=coordinator.trigger_revision,
                cancelled=cancelled,
                exchange=run.exchange,
            )

        try:
            await run_beside_coordinator(coordinator, run_tasks, cancelled.set)
        finally:
            await coordinator.close()
    return 0 if restore is None else restore.metadata.checkpoint_id


class InProcessStage:
    """A `Stage` running each launch's tasks as threads of this process (`run_local`),
    where `BarrierStage` runs them on Spark. `restored` is what each launch restored."""

    def __init__(self, exchange: Literal["memory", "tcp"] = "memory") -> None:
        self._exchange: Literal["memory", "tcp"] = exchange
        self._cancelled = threading.Event()
        self.restored: list[str | None] = []

    def run(self, spec: JobSpec) -> None:
        self.restored.append(None if spec.restore is None else spec.restore.url)
        try:
            run_local(
                spec.graph(),
                [spec.task_config(i) for i in range(spec.parallelism)],
                lambda i: CheckpointControl(spec.etcd, spec.keys, i, spec.launch),
                spec.restore,
                channel_capacity=spec.channel_capacity,
                trigger_revision=spec.trigger_revision,
                cancelled=self._cancelled,
                exchange=self._exchange,
            )
        finally:
            # Renewed after the launch, not before it: a cancel that comes before
            # the launch's thread got here still stops it.
            self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()
