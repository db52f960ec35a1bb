"""The load signals a task exports for sizing its job: busy time is the time a
chain works — not waiting for input, not waiting for credit downstream — and
records per second and a source's backlog (or that it cannot tell it) come
with it. A real task on etcd, scraped through its registry as Prometheus does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.local_runner import local_wiring
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.task import Task, TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.task_metrics import task_registry
from lockgate.runtime.snapshot.storage import CheckpointStorage
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.polling import eventually


@dataclass
class RunningTask:
    task: Task
    registry: CollectorRegistry
    """Made as the task starts, as the task's metrics server makes it."""

    def scrape(self, name: str, vertex: str) -> float | None:
        text = generate_latest(self.registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels["vertex"] == vertex:
                    return sample.value
        return None


@pytest.fixture
async def start_task(etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path) -> AsyncIterator[object]:
    """Starts one task (P = 1) of `tests.jobs.costly:costly_pass` with the given arguments."""
    running: list[tuple[Task, threading.Thread, CheckpointControl]] = []
    async with Etcd(etcd_config) as etcd:
        coordinators: list[tuple[CheckpointCoordinator, asyncio.Task[None]]] = []

        async def start(unaligned_after_s: float | None = None, **args: str) -> RunningTask:
            graph = build_graph(
                "tests.jobs.costly:costly_pass", keys.job, {**args, "output": f"file://{tmp_path}/out"}
            )
            storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
            config = CheckpointConfig(interval_s=1.0, timeout_s=60)
            coordinator = CheckpointCoordinator(etcd, keys, storage, job_plan(graph, 1, 16), config)
            await coordinator.start()
            coordinators.append((coordinator, asyncio.create_task(coordinator.run())))
            control = CheckpointControl(etcd_config, keys, 0, coordinator.launch)
            cancelled = threading.Event()
            wiring = local_wiring(graph, 1, 4, cancelled)[0]
            state = StateConfig("heap", tmp_path / "local", 16)
            config = TaskConfig(0, 1, state, unaligned_after_s=unaligned_after_s)
            task = Task(graph, config, control, wiring=wiring, cancelled=cancelled)
            registry = task_registry(task, keys)
            control.start(coordinator.trigger_revision)
            thread = threading.Thread(target=task.run, name="task-0", daemon=True)
            thread.start()
            running.append((task, thread, control))
            return RunningTask(task, registry)

        try:
            yield start
        finally:
            for task, thread, control in running:
                task.cancelled.set()
                thread.join(30)
                control.close()
            for coordinator, run in coordinators:
                await cancel_and_wait([run], "stopping the coordinator")
                await coordinator.close()


async def test_busy_time_is_the_work_not_the_wait_for_input(start_task) -> None:
    """100 records/s through a stage costing 3 ms each: that stage is busy ~30% of
    the time, the source that waits for its rate almost never."""
    job: RunningTask = await start_task(rate="100", cost_ms="3")

    def processed() -> float:
        return job.scrape("lockgate_records_in_total", "costly") or 0

    await eventually(lambda: processed() >= 400, "4 s of records went through", 60)
    busy = job.scrape("lockgate_busy_ratio", "costly")
    assert busy is not None
    assert 0.2 <= busy <= 0.75, f"3 ms x 100/s is ~0.3 of the time, measured {busy}"
    source_busy = job.scrape("lockgate_busy_ratio", "numbers")
    assert source_busy is not None
    assert source_busy < 0.2, f"the source waits for its rate, measured busy {source_busy}"
    rate = job.scrape("lockgate_records_in_per_second", "costly")
    assert rate is not None
    assert 60 <= rate <= 140, f"offered 100/s, measured {rate}"
    busy_s = job.scrape("lockgate_busy_seconds_total", "costly")
    assert busy_s is not None
    assert busy_s >= 400 * 0.003, "at least the records' cost"
    assert job.scrape("lockgate_source_lag_known", "numbers") == 1, "a rate-held generator tells what is due"
    assert job.scrape("lockgate_source_lag_records", "numbers") is not None


async def test_waiting_for_credit_downstream_is_not_busy(start_task) -> None:
    """An unthrottled source feeding a stage of 1 ms a record spends its time
    waiting for room in the exchange: backpressured, not busy; the stage is busy
    nearly all the time. An unthrottled generator cannot tell its backlog, and
    says so."""
    job: RunningTask = await start_task(cost_ms="1")
    await eventually(
        lambda: (job.scrape("lockgate_records_in_total", "costly") or 0) >= 2000, "2 s of work done", 60
    )
    busy = job.scrape("lockgate_busy_ratio", "costly")
    assert busy is not None
    assert busy >= 0.8, f"the stage never waits for input, measured busy {busy}"
    source_busy = job.scrape("lockgate_busy_ratio", "numbers")
    blocked = job.scrape("lockgate_backpressured_seconds_total", "numbers")
    source_busy_s = job.scrape("lockgate_busy_seconds_total", "numbers")
    assert source_busy is not None
    assert blocked is not None
    assert source_busy_s is not None
    assert source_busy < 0.5, f"the source mostly waits for credit, measured busy {source_busy}"
    assert blocked > source_busy_s, f"blocked {blocked} s, busy {source_busy_s} s"
    assert job.scrape("lockgate_source_lag_known", "numbers") == 0
    assert job.scrape("lockgate_source_lag_records", "numbers") is None, "no lag series when unknown"


async def test_a_checkpoint_taken_unaligned_is_counted_by_the_keyed_vertex(start_task) -> None:
    """Under backpressure (an unthrottled source, 2 ms a record) records are queued
    ahead of every barrier, so each checkpoint is taken unaligned. (Where nothing is
    ahead of the barriers, the alignment is complete at once and counts as aligned.)"""
    job: RunningTask = await start_task(unaligned_after_s=0.0, cost_ms="2")

    def unaligned() -> float:
        return job.scrape("lockgate_checkpoints_unaligned_total", "costly") or 0

    await eventually(lambda: unaligned() >= 2, "two checkpoints taken unaligned", 60)
