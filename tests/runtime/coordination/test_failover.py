"""Leadership and failures of etcd and of the coordinator, against real etcd."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from lockgate.runtime.coordination.coordinator import CheckpointConfig, JobPlan
from lockgate.runtime.coordination.errors import (
    CheckpointAbortedError,
    CoordinatorConflictError,
    CoordinatorFencedError,
)
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys

from tests.polling import eventually
from tests.runtime.coordination.running_job import Job

MANUAL = CheckpointConfig(interval_s=None, timeout_s=60, retained=1)


async def _wait_until_deleted(etcd: Etcd, key: bytes) -> None:
    _, revision = await etcd.get_prefix_at(key)
    if await etcd.get(key) is None:
        return
    async for event in etcd.watch_prefix(key, revision + 1):
        if event.deleted and event.key == key:
            return


async def test_etcd_restarted_mid_checkpoint(tmp_path: Path, keys: JobKeys) -> None:
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    try:
        async with Etcd(EtcdConfig((server.endpoint,), retries=40)) as etcd:
            job = Job(etcd, keys, tmp_path, JobPlan({"source": 2, "count": 2}, 16))
            await job.start_subtasks()
            held = job.subtasks[2:]
            for subtask in held:
                subtask.gate.clear()
            coordinator = job.coordinator(MANUAL)
            await coordinator.start()
            try:
                done = coordinator.trigger()
                await eventually(lambda: len(coordinator.pending[1].acks) >= 2, "the first two acks are in")
                await asyncio.to_thread(server.restart)
                for subtask in held:
                    subtask.gate.set()
                summary = await asyncio.wait_for(done, 30)
            finally:
                await coordinator.close()
                await job.stop()
            assert summary.checkpoint_id == 1
            assert await etcd.get(keys.latest) == b"1"
    finally:
        server.stop()


async def test_second_coordinator_is_refused_with_a_clear_message(job: Job) -> None:
    first = job.coordinator(MANUAL)
    await first.start()
    second = job.coordinator(MANUAL)
    try:
        with pytest.raises(CoordinatorConflictError, match=rf"already coordinated by .*pid {os.getpid()}"):
            await second.start(wait_s=0)
    finally:
        await first.close()


async def test_new_coordinator_takes_over_from_etcd_state(job: Job) -> None:
    first = job.coordinator(MANUAL, lease_ttl_s=2)
    await first.start()
    await asyncio.wait_for(first.trigger(), 10)
    await asyncio.wait_for(first.trigger(), 10)
    await first.close(release=False)  # crashed: the lease is left to expire

    second = job.coordinator(MANUAL, lease_ttl_s=2)
    await second.start(wait_s=10)
    try:
        third = await asyncio.wait_for(second.trigger(), 10)
    finally:
        await second.close()
    assert third.checkpoint_id == 3
    assert [c.checkpoint_id for c in await second.store.all()] == [3]  # retained=1
    assert await job.store.get(job.keys.latest) == b"3"


async def test_zombie_coordinator_can_complete_nothing(job: Job) -> None:
    zombie = job.coordinator(MANUAL, lease_ttl_s=2)
    await zombie.start()
    runner = asyncio.create_task(zombie.run())
    for subtask in job.subtasks:
        subtask.gate.clear()
    stale = zombie.trigger()
    await eventually(lambda: zombie.pending[1].published, "the trigger reached etcd before the lease goes")
    zombie.leadership.abandon()  # cut off from etcd: its lease expires
    await asyncio.wait_for(_wait_until_deleted(job.store, job.keys.coordinator), 10)

    successor = job.coordinator(MANUAL, lease_ttl_s=2)
    await successor.start()
    try:
        for subtask in job.subtasks:
            subtask.gate.set()  # the subtasks now acknowledge the zombie's trigger
        with pytest.raises(CheckpointAbortedError, match="replaced"):
            await asyncio.wait_for(stale, 10)
        with pytest.raises(CoordinatorFencedError):
            await asyncio.wait_for(runner, 10)
        assert await job.store.get(job.keys.latest) is None
        target = job.storage.checkpoint_dir(job.keys.job, 1)
        assert not job.storage.exists(f"{target}/_metadata")
        fresh = await asyncio.wait_for(successor.trigger(), 10)
        assert fresh.checkpoint_id == 2
    finally:
        await zombie.close(release=False)
        await successor.close()


async def test_a_checkpoint_in_flight_when_its_launch_ended_leaves_no_files(job: Job) -> None:
    """Ids are never reused: what a dead launch's unfinished checkpoint uploaded was read,
    and deleted, by nobody (seen in the soak: a `chk-30` without `_metadata`)."""
    first = job.coordinator(MANUAL)
    await first.start()
    await asyncio.wait_for(first.trigger(), 10)
    for subtask in job.subtasks:
        subtask.gate.clear()  # checkpoint 2 is never acknowledged
    first.trigger()
    await eventually(lambda: first.pending[2].published, "checkpoint 2 reached etcd")
    unfinished = job.storage.checkpoint_dir(job.keys.job, 2)
    job.storage.write_file(f"{unfinished}/source/0/state", b"half an upload", unfinished)
    await first.close()  # the launch ends with checkpoint 2 in flight

    successor = job.coordinator(MANUAL)
    await successor.start()
    try:
        assert not job.storage.exists(unfinished)
        assert job.storage.exists(f"{job.storage.checkpoint_dir(job.keys.job, 1)}/_metadata")
        for subtask in job.subtasks:
            subtask.gate.set()  # the new launch's tasks answer (those of the first answer nothing more)
        assert (await asyncio.wait_for(successor.trigger(), 10)).checkpoint_id == 3
    finally:
        await successor.close()
