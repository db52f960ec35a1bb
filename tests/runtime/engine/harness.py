"""Runs a job graph with the in-process runner (`run_in_process`), against a real
etcd or the in-memory control plane, with the engine's knobs the tests turn."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.control_plane import ControlPlane
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.channels import DEFAULT_CHANNEL_CAPACITY
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.in_process import run_in_process
from lockgate.runtime.engine.job_spec import JobSpec
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
    spec = JobSpec(
        graph.name,
        keys,
        run.parallelism,
        StateConfig(run.backend, tmp_path / "local", M),
        control_plane,
        secret=secrets.token_bytes(32),
        mode=run.mode,
        bounded=True,
        batch_size=run.batch_size,
        channel_capacity=run.channel_capacity,
        in_flight_target_s=run.in_flight_target_s,
        graph_factory=lambda: graph,  # one graph, shared by the tasks
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=run.interval_s, timeout_s=30, retained=2)
    result = await run_in_process(spec, storage, config, exchange=run.exchange)
    restored = re.search(r"/chk-(\d+)$", result.restored_from or "")
    return 0 if restored is None else int(restored[1])
