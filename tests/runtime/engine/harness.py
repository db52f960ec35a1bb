"""Runs a job graph in-process beside a real coordinator, against a real etcd or the
in-memory control plane."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.control_plane import ControlPlane, open_control_plane
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.restore_point import resolve_restore_point
from lockgate.runtime.engine.channels import DEFAULT_CHANNEL_CAPACITY
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
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
    channel_capacity: int = DEFAULT_CHANNEL_CAPACITY
    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"
    in_flight_target_s: float | None = DEFAULT_IN_FLIGHT_TARGET_S


async def run_job(
    control_plane: ControlPlane, keys: JobKeys, tmp_path: Path, graph: JobGraph, run: Run
) -> int:
    """Run to the end, restoring from the latest checkpoint if there is one;
    returns the id restored from (0: none)."""
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    async with open_control_plane(control_plane) as store:
        config = CheckpointConfig(interval_s=run.interval_s, timeout_s=30, retained=2)
        plan = job_plan(graph, run.parallelism, M)
        coordinator = CheckpointCoordinator(store, keys, storage, plan, config)
        await coordinator.start()
        restore = await resolve_restore_point(coordinator.store)
        state = StateConfig(run.backend, tmp_path / "local", M)
        configs = [
            TaskConfig(
                i,
                run.parallelism,
                state,
                mode=run.mode,
                bounded=True,
                batch_size=run.batch_size,
                in_flight_target_s=run.in_flight_target_s,
            )
            for i in range(run.parallelism)
        ]
        cancelled = threading.Event()

        def run_tasks() -> None:
            run_local(
                graph,
                configs,
                lambda i: CheckpointControl(control_plane, keys, i, coordinator.launch),
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
