"""The fixture of the runtime tests that drive a coordinator and its subtasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from lockgate.runtime.coordination.coordinator import JobPlan
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.keys import JobKeys

from tests.runtime.coordination.running_job import Job


@pytest_asyncio.fixture
async def job(etcd: Etcd, keys: JobKeys, tmp_path: Path) -> AsyncIterator[Job]:
    running = Job(etcd, keys, tmp_path, JobPlan({"source": 2, "count": 2}, 16))
    await running.start_subtasks()
    yield running
    await running.stop()
