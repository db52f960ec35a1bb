"""Run a job, fail it mid-stream, run it again from its latest checkpoint: exactly once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, StreamEnvironment, read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.restore_point import resolve_restore_point
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.local_runner import run_local
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.supervision import run_beside_coordinator
from lockgate.runtime.engine.task import TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.jobs.counting import FailOnce, failing_running_sum

M = 32
COUNT = 20_000


async def _attempt(etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path, parallelism: int, graph) -> int:
    """Run once (restoring from the latest checkpoint, if any); returns the restored id or 0."""
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    async with Etcd(etcd_config) as etcd:
        config = CheckpointConfig(interval_s=0.02, timeout_s=30, retained=2)
        coordinator = CheckpointCoordinator(etcd, keys, storage, job_plan(graph, parallelism, M), config)
        await coordinator.start()
        restore = await resolve_restore_point(coordinator.store)
        state = StateConfig("rocksdb", tmp_path / "local", M)
        configs = [TaskConfig(i, parallelism, state, bounded=True, batch_size=32) for i in range(parallelism)]
        cancelled = threading.Event()

        def run_tasks() -> None:
            run_local(
                graph,
                configs,
                lambda i: CheckpointControl(etcd_config, keys, i),
                restore,
                channel_capacity=16,
                trigger_revision=coordinator.trigger_revision,
                cancelled=cancelled,
            )

        try:
            await run_beside_coordinator(coordinator, run_tasks, cancelled.set)
        finally:
            await coordinator.close()
    return 0 if restore is None else restore.metadata.checkpoint_id


@pytest.mark.parametrize("parallelism", [1, 3])
async def test_failure_then_restart_from_checkpoint_is_exactly_once(
    etcd_config, keys, tmp_path: Path, parallelism: int
) -> None:
    env = StreamEnvironment("sum")
    source = GeneratorSource(COUNT, keys=41, partitions=6, rate=10_000)
    fail = FailOnce(at=COUNT // 4, flag=str(tmp_path / "failed-once"), committed_dir=str(tmp_path / "out"))
    failing_running_sum(env, source, f"file://{tmp_path}/out", fail)
    graph = env.graph()

    with pytest.raises(RuntimeError, match="injected failure"):
        await _attempt(etcd_config, keys, tmp_path, parallelism, graph)
    partial = read_committed(f"file://{tmp_path}/out")
    assert 0 < len(partial) < COUNT, "the first attempt committed some output, not all"

    restored_from = await _attempt(etcd_config, keys, tmp_path, parallelism, graph)
    assert restored_from > 0

    output = read_committed(f"file://{tmp_path}/out")
    assert sorted(r["n"] for r in output) == list(range(COUNT)), "nothing lost, nothing twice"
    finals: dict[int, int] = {}
    for record in output:
        finals[record["key"]] = max(finals.get(record["key"], 0), record["sum"])
    assert finals == {k: sum(range(k, COUNT, 41)) for k in range(41)}
