"""The engine with its control plane in memory: a whole job — coordinator, tasks on
threads, checkpoints, a failure and the restore after it — with no etcd and no Spark.
The same job master, coordinator and tasks that run against etcd."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import Put
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import EarlierRunError, JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.exactness import assert_running_sums_exact
from tests.polling import eventually_true

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


class AnswersAfterTheTasksEnd(InMemoryStore):
    """Holds the write of a savepoint's "completed" answer until the launch's tasks
    have ended, then makes it take a second (a slow etcd): the order a loaded machine
    can give them."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks_ended = threading.Event()

    async def transaction(self, compare: Any, success: Any, failure: Any = ()) -> bool:
        if any(
            isinstance(op, Put) and b"/savepoints/results/" in op.key and b'"completed"' in op.value
            for op in success
        ):
            await asyncio.to_thread(self.tasks_ended.wait, 30)
            await asyncio.sleep(1.0)  # the injected latency of this one write
        return await super().transaction(compare, success, failure)


class TellingStage(ThreadStage):
    def __init__(self, ended: threading.Event) -> None:
        super().__init__()
        self._ended = ended

    def run(self, spec: JobSpec) -> None:
        try:
            super().run(spec)
        finally:
            self._ended.set()


async def test_a_stop_whose_answer_the_coordinator_writes_after_the_tasks_ended_is_answered(
    tmp_path: Path,
) -> None:
    store = AnswersAfterTheTasksEnd()
    args = {"count": "unbounded", "keys": "7", "rate": "2000", "output": f"file://{tmp_path}/out"}
    spec = dataclasses.replace(
        _spec(tmp_path, "tests.jobs.configurable:running_sum", store, args), bounded=False
    )
    master = JobMaster(
        spec,
        TellingStage(store.tasks_ended),
        CheckpointStorage(f"file://{tmp_path}/checkpoints"),
        CheckpointConfig(interval_s=0.05, timeout_s=30),
        savepoint_dir=f"file://{tmp_path}/savepoints",
    )
    run = asyncio.create_task(master.run(restart_strategy("none")))

    async def checkpointed() -> bool:
        return await store.get(spec.keys.latest) is not None

    await eventually_true(checkpointed, "a checkpoint completed", 60)
    request = await request_savepoint(store, spec.keys, stop=True, expires_in_s=60)
    answer = await await_savepoint(store, spec.keys, request, 20)
    stopped = await asyncio.wait_for(run, 30)

    assert answer.status == "completed"
    assert stopped.savepoint == answer.path, "the run says it stopped with that savepoint"
