"""The fixtures of the runtime tests that drive a coordinator and its subtasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.coordinator import JobPlan
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys

from tests.runtime.coordination.running_job import Job


@pytest_asyncio.fixture
async def job(etcd: Etcd, keys: JobKeys, tmp_path: Path) -> AsyncIterator[Job]:
    running = Job(etcd, keys, tmp_path, JobPlan({"source": 2, "count": 2}, 16))
    await running.start_subtasks()
    yield running
    await running.stop()


@pytest_asyncio.fixture
async def manual_job(keys: JobKeys, tmp_path: Path) -> AsyncIterator[Job]:
    """`job` on the in-memory control plane, its coordinators on a `ManualClock`
    (`job.clock`): a test moves time and calls `coordinator.tick()`, never waits."""
    clock = ManualClock(1_000_000)
    running = Job(InMemoryStore(clock), keys, tmp_path, JobPlan({"source": 2, "count": 2}, 16), clock)
    await running.start_subtasks()
    yield running
    await running.stop()
