"""The engine end to end in one process: exact output with checkpoints running."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, LogSource, StreamEnvironment, read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.local_runner import run_local
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.task import TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.jobs.counting import running_sum, word_count

M = 32


def _write_lines(directory: Path, partitions: int, lines: int) -> list[str]:
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(50)]
    directory.mkdir(parents=True)
    words = []
    for p in range(partitions):
        with open(directory / f"part-{p}.jsonl", "w") as f:
            for _ in range(lines):
                line = [rng.choice(vocabulary) for _ in range(rng.randint(1, 8))]
                words += line
                f.write(json.dumps({"text": " ".join(line)}) + "\n")
    return words


async def _run(
    etcd_config: EtcdConfig,
    keys: JobKeys,
    tmp_path: Path,
    graph,
    parallelism: int,
    backend: str,
) -> CheckpointCoordinator:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    async with Etcd(etcd_config) as etcd:
        coordinator = CheckpointCoordinator(
            etcd,
            keys,
            storage,
            job_plan(graph, parallelism, M),
            CheckpointConfig(interval_s=0.1, timeout_s=30),
        )
        await coordinator.start()
        runner = asyncio.create_task(coordinator.run())
        state = StateConfig(backend, tmp_path / "local", M)  # type: ignore[arg-type]
        configs = [TaskConfig(i, parallelism, state, bounded=True, batch_size=64) for i in range(parallelism)]
        try:
            await asyncio.wait_for(
                asyncio.to_thread(
                    run_local,
                    graph,
                    configs,
                    lambda i: CheckpointControl(etcd_config, keys, i),
                    trigger_revision=coordinator.trigger_revision,
                ),
                120,
            )
        finally:
            runner.cancel()
            await coordinator.close()
    return coordinator


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_word_count_is_exact(etcd_config, keys, tmp_path: Path, parallelism: int) -> None:
    words = _write_lines(tmp_path / "lines", partitions=4, lines=300)
    env = StreamEnvironment("wc")
    word_count(env, LogSource(f"file://{tmp_path}/lines"), f"file://{tmp_path}/out")
    backend = "rocksdb" if parallelism != 2 else "heap"
    await _run(etcd_config, keys, tmp_path, env.graph(), parallelism, backend)

    output = read_committed(f"file://{tmp_path}/out")
    expected = Counter(words)
    assert Counter((r["word"], r["count"]) for r in output) == Counter(
        (w, k) for w, n in expected.items() for k in range(1, n + 1)
    )


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_keyed_running_sum_is_exact(etcd_config, keys, tmp_path: Path, parallelism: int) -> None:
    env = StreamEnvironment("sum")
    running_sum(env, GeneratorSource(5000, keys=37, partitions=5), f"file://{tmp_path}/out")
    await _run(etcd_config, keys, tmp_path, env.graph(), parallelism, "rocksdb")

    output = read_committed(f"file://{tmp_path}/out")
    assert sorted(r["n"] for r in output) == list(range(5000))
    finals = {}
    for record in output:
        finals[record["key"]] = max(finals.get(record["key"], 0), record["sum"])
    assert finals == {k: sum(n for n in range(5000) if n % 37 == k) for k in range(37)}
