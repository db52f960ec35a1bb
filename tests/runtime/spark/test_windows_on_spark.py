"""Event time on the product path: session windows over out-of-order input on
Spark barrier stages, against a real etcd, give exactly the plain-Python
reference at P = 1, 2, 3 — and across a stop with a savepoint at P = 2 and a
resume at P = 3 mid-stream; late records are dropped and counted in the tasks'
metrics; a silent partition stops holding the watermark back after its idleness
timeout, so windows fire while the job runs."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage

from tests.jobs.sessions import write_sessions
from tests.one_launch import run_once
from tests.polling import eventually_true
from tests.runtime.metrics.metered_job import MeteredJob, free_port_range
from tests.runtime.metrics.scrape import scrape, total

M = 32


def _spec(
    etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path, parallelism: int, delay_s: str = "0"
) -> JobSpec:
    args = {"input": f"file://{tmp_path}/events", "output": f"file://{tmp_path}/out", "delay_s": delay_s}
    return JobSpec(
        entrypoint="tests.jobs.sessions:sessions_job",
        keys=keys,
        parallelism=parallelism,
        state=StateConfig("rocksdb", tmp_path / f"local-{parallelism}", M),
        control_plane=etcd_config,
        secret=secrets.token_bytes(32),
        args=tuple(args.items()),
        bounded=True,
        batch_size=16,
    )


def _sessions(tmp_path: Path) -> list[tuple[Any, ...]]:
    return [(r["user"], r["start"], r["end"], r["count"]) for r in read_committed(f"file://{tmp_path}/out")]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_session_windows_on_spark_are_exactly_the_reference(
    spark: Any, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path, parallelism: int
) -> None:
    expected = write_sessions(tmp_path / "events", users=60, partitions=4, seed=parallelism)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    spec = _spec(etcd_config, keys, tmp_path, parallelism)
    await run_once(spec, BarrierStage(spark), storage, CheckpointConfig(interval_s=0.2, timeout_s=60))
    got = _sessions(tmp_path)
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected


async def test_sessions_stopped_with_a_savepoint_at_2_on_spark_resume_at_3_exactly(
    spark: Any, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path
) -> None:
    expected = write_sessions(tmp_path / "events", users=80, partitions=4, seed=7)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.1, timeout_s=60)
    slow = _spec(etcd_config, keys, tmp_path, 2, delay_s="0.002")
    first = JobMaster(
        slow, BarrierStage(spark), storage, config, savepoint_dir=f"file://{tmp_path}/savepoints"
    )
    run = asyncio.create_task(first.run(restart_strategy("none")))
    async with Etcd(etcd_config) as etcd:

        async def checkpointed() -> bool:
            return await etcd.get(keys.latest) is not None

        await eventually_true(checkpointed, "a checkpoint completed: the job is mid-stream", 120)
        request = await request_savepoint(etcd, keys, stop=True, expires_in_s=120)
        savepoint = await await_savepoint(etcd, keys, request, 120)
    stopped = await asyncio.wait_for(run, 120)
    assert savepoint.status == "completed"
    assert stopped.savepoint == savepoint.path
    assert set(_sessions(tmp_path)) < expected, "stopped mid-stream: some sessions are still to come"

    second = JobMaster(_spec(etcd_config, keys, tmp_path, 3), BarrierStage(spark), storage, config)
    await asyncio.wait_for(second.run(restart_strategy("none"), from_savepoint=savepoint.path), 180)
    got = _sessions(tmp_path)
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected


def _clicks(path: Path, events: list[tuple[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"user": user, "ts": ts}) + "\n" for user, ts in events))


async def test_records_behind_the_watermark_are_dropped_and_counted_in_the_task_metrics(
    spark: Any, etcd: Etcd, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path
) -> None:
    # One partition read a record at a time, a watermark after each: each record's
    # watermark comes before the next.
    _clicks(
        tmp_path / "clicks" / "part-0.jsonl",
        [("a", 1_000), ("a", 2_000), ("b", 100_000), ("a", 1_500), ("b", 3_000)],
    )
    job = MeteredJob.start(
        spark,
        etcd_config,
        keys,
        tmp_path,
        "tests.jobs.sessions:counts_job",
        {
            "input": f"file://{tmp_path}/clicks",
            "output": f"file://{tmp_path}/out",
            "watermark_interval_ms": "0",
        },
        task_ports=free_port_range(10),
        interval_s=0.2,
        batch_size=1,
        parallelism=1,  # one source subtask: no other one's watermark or idleness races the records
    )
    try:

        async def both_late_ones_counted() -> bool:
            assert not job.run.done(), job.run.exception() if job.run.done() else ""
            scraped = [await asyncio.to_thread(scrape, p) for p in job.task_port_numbers()]
            samples = [s for each in scraped for s in each]
            return total(samples, "lockgate_late_records_dropped_total", vertex="per-10s") == 2

        await eventually_true(both_late_ones_counted, "the two late records are counted", 120)
        await job.stop_with_savepoint(etcd)
    finally:
        job.close()
    output = read_committed(f"file://{tmp_path}/out")
    assert {(r["user"], r["start"], r["n"]) for r in output} == {("a", 0, 2)}, (
        "the window of a's first two clicks fired; the late clicks changed nothing"
    )


async def test_a_silent_partition_stops_holding_back_the_watermark_after_its_idleness(
    spark: Any, etcd: Etcd, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path
) -> None:
    _clicks(tmp_path / "clicks" / "part-0.jsonl", [("a", t) for t in range(0, 60_000, 1_000)])
    _clicks(tmp_path / "clicks" / "part-1.jsonl", [])  # a partition nothing is written to
    job = MeteredJob.start(
        spark,
        etcd_config,
        keys,
        tmp_path,
        "tests.jobs.sessions:counts_job",
        {"input": f"file://{tmp_path}/clicks", "output": f"file://{tmp_path}/out", "idleness_ms": "500"},
        task_ports=free_port_range(10),
        interval_s=0.2,
    )
    try:

        async def windows_fired_while_running() -> bool:
            assert not job.run.done(), job.run.exception() if job.run.done() else ""
            return len(read_committed(f"file://{tmp_path}/out")) == 5

        # Unbounded: only the silent partition letting go can move event time past 50 s.
        await eventually_true(windows_fired_while_running, "windows up to 50 s fired and committed", 120)
        await job.stop_with_savepoint(etcd)
    finally:
        job.close()
    output = read_committed(f"file://{tmp_path}/out")
    assert sorted((r["start"], r["n"]) for r in output) == [(s, 10) for s in range(0, 50_000, 10_000)]
