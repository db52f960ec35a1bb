"""The engine with its control plane in memory: a whole job — coordinator, tasks on
threads, checkpoints, a failure and the restore after it — with no etcd and no Spark.
The same job master, coordinator and tasks that run against etcd."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.job_master import EarlierRunError, JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.thread_stage import ThreadStage
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.exactness import assert_running_sums_exact

COUNT, KEYS = 6_000, 17


def _spec(tmp_path: Path, entrypoint: str, store: InMemoryStore, args: dict[str, str]) -> JobSpec:
    return JobSpec(
        entrypoint,
        JobKeys("test", "in-process"),
        2,
        StateConfig("heap", tmp_path / "local", 32),
        store,
        secret=b"s" * 32,
        args=tuple(args.items()),
        bounded=True,
    )


async def test_a_job_fails_restores_and_ends_exactly_once_with_no_services(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    store = InMemoryStore()
    args = {
        "count": str(COUNT),
        "keys": str(KEYS),
        "rate": "6000",
        "output": out,
        "fail_at": str(COUNT // 2),
        "flag": str(tmp_path / "failed-once"),
    }
    spec = _spec(tmp_path, "tests.jobs.configurable:failing_running_sum", store, args)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.1, timeout_s=30))
    result = await asyncio.wait_for(master.run(restart_strategy("fixed-delay", attempts=2, delay_s=0)), 120)

    assert result.restarts == 1, "the failure was restarted from a checkpoint"
    assert (tmp_path / "failed-once").exists()
    assert_running_sums_exact(read_committed(out), COUNT, KEYS)
    keys = spec.keys
    assert await store.get(keys.latest) is not None, "checkpoints completed in the in-memory control plane"
    assert await store.get(keys.coordinator) is None, "the coordinator let go of the job when it ended"


async def test_a_run_asked_to_resume_restores_the_latest_checkpoint_and_refuses_when_there_is_none(
    tmp_path: Path,
) -> None:
    store = InMemoryStore()
    args = {"count": "600", "keys": "7", "output": f"file://{tmp_path}/out"}
    spec = _spec(tmp_path, "tests.jobs.configurable:running_sum", store, args)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.05, timeout_s=30)

    def master() -> JobMaster:
        return JobMaster(spec, ThreadStage(), storage, config)

    with pytest.raises(EarlierRunError, match="has no completed checkpoint to resume from; run it without"):
        await master().run(restart_strategy("none"), earlier_checkpoints="require")
    first = await master().run(restart_strategy("none"), earlier_checkpoints="refuse")
    resuming = master()
    resumed = await resuming.run(restart_strategy("none"), earlier_checkpoints="require")

    assert first.restored_from is None
    assert "/chk-" in str(resumed.restored_from), "the first run's latest checkpoint"
    assert resuming.restored_from == resumed.restored_from, "what the progress line shows"
    assert_running_sums_exact(read_committed(args["output"]), 600, 7)


async def test_a_job_whose_sources_know_they_are_finite_ends_without_being_told_it_is_bounded(
    tmp_path: Path,
) -> None:
    """A GeneratorSource with a count and a LogSource(bounded=True): read, a final
    checkpoint, committed, done — no `--bounded`."""
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "part-0.jsonl").write_text("".join(f'{{"text": "w{i % 5} x"}}\n' for i in range(40)))
    store = InMemoryStore()
    out = f"file://{tmp_path}/sums"
    generated = dataclasses.replace(
        _spec(
            tmp_path,
            "tests.jobs.configurable:running_sum",
            store,
            {"count": "300", "keys": "7", "output": out},
        ),
        bounded=False,
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.05, timeout_s=30)
    await JobMaster(generated, ThreadStage(), storage, config).run(restart_strategy("none"))
    assert_running_sums_exact(read_committed(out), 300, 7)

    words = f"file://{tmp_path}/words"
    logged = dataclasses.replace(
        _spec(
            tmp_path,
            "tests.jobs.configurable:word_count",
            InMemoryStore(),
            {"input": f"file://{lines}", "output": words, "bounded": "true"},
        ),
        bounded=False,
    )
    await JobMaster(logged, ThreadStage(), CheckpointStorage(f"file://{tmp_path}/more"), config).run(
        restart_strategy("none")
    )
    assert len(read_committed(words)) == 80
