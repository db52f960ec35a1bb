"""Run a job, fail it mid-stream, run it again from its latest checkpoint: exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, StreamEnvironment, read_committed

from tests.exactness import assert_running_sums_exact
from tests.jobs.counting import FailOnce, failing_running_sum
from tests.runtime.engine.harness import Run, run_job

COUNT = 20_000


@pytest.mark.parametrize(("parallelism", "exchange"), [(1, "memory"), (3, "tcp")])
async def test_failure_then_restart_from_checkpoint_is_exactly_once(
    etcd_config, keys, tmp_path: Path, parallelism: int, exchange
) -> None:
    run = Run(parallelism, exchange=exchange, interval_s=0.05, batch_size=32)
    env = StreamEnvironment("sum")
    source = GeneratorSource(COUNT, keys=41, partitions=6, rate=10_000)
    fail = FailOnce(at=COUNT // 4, flag=str(tmp_path / "failed-once"), committed_dir=str(tmp_path / "out"))
    failing_running_sum(env, source, f"file://{tmp_path}/out", fail)
    graph = env.graph()

    with pytest.raises(RuntimeError, match="injected failure"):
        await run_job(etcd_config, keys, tmp_path, graph, run)
    partial = read_committed(f"file://{tmp_path}/out")
    assert 0 < len(partial) < COUNT, "the first attempt committed some output, not all"

    restored_from = await run_job(etcd_config, keys, tmp_path, graph, run)
    assert restored_from > 0

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, COUNT, 41)
