"""Savepoint requests in etcd: round trip, idempotence, queueing, stop."""

from __future__ import annotations

import asyncio

import pytest
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.records import SavepointResult, decode
from lockgate.runtime.coordination.restore_point import verify
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.polling import eventually
from tests.runtime.coordination.running_job import Job

MANUAL = CheckpointConfig(interval_s=None, timeout_s=30)


async def test_savepoint_request_round_trip(job: Job, tmp_path) -> None:
    counting = job.subtasks[-1]
    counting.keyed = RocksDBKeyedStateBackend(16, range(8, 16), tmp_path / "rocks", incremental=True)
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    runner = asyncio.create_task(coordinator.run())
    try:
        request_id = await request_savepoint(job.store, job.keys, expires_in_s=60)
        result = await await_savepoint(job.store, job.keys, request_id, 20)
        assert not runner.done(), "a savepoint without stop leaves the job running"
    finally:
        runner.cancel()
        await coordinator.close()
    assert result.status == "completed"
    assert result.path is not None
    assert result.path.startswith(f"{job.savepoint_dir}/savepoint-{request_id}-")
    storage = CheckpointStorage(result.path)
    metadata = read_metadata(storage, storage.root)
    assert metadata.kind == "savepoint"
    handle = metadata.vertices["count"].subtasks[1].keyed
    assert isinstance(handle, CanonicalKeyedHandle), "savepoints are canonical even on RocksDB"


async def test_the_same_request_id_is_served_once(job: Job) -> None:
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        await request_savepoint(job.store, job.keys, request_id="nightly", expires_in_s=60)
        first = await await_savepoint(job.store, job.keys, "nightly", 20)
        await request_savepoint(job.store, job.keys, request_id="nightly", expires_in_s=60)  # written again
        later = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert first.checkpoint_id == 1
    assert later.checkpoint_id == 2, "no second savepoint was taken for the same id"
    stored = decode(SavepointResult, await job.store.get(job.keys.savepoint_result("nightly")))  # type: ignore[arg-type]
    assert stored == first


async def test_a_second_request_waits_its_turn(job: Job) -> None:
    for subtask in job.subtasks:
        subtask.gate.clear()
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        await request_savepoint(job.store, job.keys, request_id="first", expires_in_s=60)
        await request_savepoint(job.store, job.keys, request_id="second", expires_in_s=60)
        await eventually(
            lambda: coordinator.savepoints.received == {"first", "second"} and bool(coordinator.pending),
            "both requests are in and the first savepoint is triggered",
        )
        assert [p.trigger.target.rsplit("/", 1)[1][:15] for p in coordinator.pending.values()] == [
            "savepoint-first"
        ]
        for subtask in job.subtasks:
            subtask.gate.set()
        first = await await_savepoint(job.store, job.keys, "first", 20)
        second = await await_savepoint(job.store, job.keys, "second", 20)
    finally:
        await coordinator.close()
    assert (first.checkpoint_id, second.checkpoint_id) == (1, 2)


async def test_stop_with_savepoint_ends_the_run_with_its_path(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=60, timeout_s=30))
    await coordinator.start()
    try:
        request_id = await request_savepoint(job.store, job.keys, stop=True, expires_in_s=60)
        path = await asyncio.wait_for(coordinator.run(), 20)
    finally:
        await coordinator.close()
    assert path is not None
    assert path.startswith(f"{job.savepoint_dir}/savepoint-{request_id}-")
    trigger = job.subtasks[0].answered
    assert trigger == [1]


async def test_savepoint_without_a_directory_fails_with_the_reason(job: Job) -> None:
    job.savepoint_dir = None  # type: ignore[assignment]
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        request_id = await request_savepoint(job.store, job.keys, expires_in_s=60)
        result = await await_savepoint(job.store, job.keys, request_id, 20)
    finally:
        await coordinator.close()
    assert result.status == "failed"
    assert "savepoints.dir" in (result.error or "")


async def test_failed_savepoint_reports_the_error(job: Job) -> None:
    job.subtasks[1].decline = "sink cannot pre-commit"
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        request_id = await request_savepoint(
            job.store, job.keys, directory=job.savepoint_dir, expires_in_s=60
        )
        result = await await_savepoint(job.store, job.keys, request_id, 20)
    finally:
        await coordinator.close()
    assert result.status == "failed"
    assert "sink cannot pre-commit" in (result.error or "")


async def test_a_failed_savepoint_never_touches_an_earlier_one_of_the_same_id(job: Job) -> None:
    """The operator's request ids repeat (per generation, launch and nonce) once a job's
    keys are forgotten and it is created anew: a savepoint directory is never reused."""
    first_launch = job.coordinator(MANUAL)
    await first_launch.start()
    try:
        await request_savepoint(job.store, job.keys, request_id="upgrade-1", expires_in_s=60)
        first = await await_savepoint(job.store, job.keys, "upgrade-1", 20)
    finally:
        await first_launch.close()
    await job.store.delete(job.keys.savepoint_result("upgrade-1"))  # the job's keys forgotten
    job.subtasks[1].decline = "sink cannot pre-commit"
    second_launch = job.coordinator(MANUAL)
    await second_launch.start()
    try:
        await request_savepoint(job.store, job.keys, request_id="upgrade-1", expires_in_s=60)
        second = await await_savepoint(job.store, job.keys, "upgrade-1", 20)
    finally:
        await second_launch.close()
    assert (first.status, second.status) == ("completed", "failed")
    assert first.path is not None
    restore = await asyncio.to_thread(verify, first.path)
    assert restore.metadata.checkpoint_id == first.checkpoint_id, "the earlier savepoint is whole"


@pytest.mark.parametrize("directory", ["memory://loot", "rel/dir"])
async def test_a_request_for_a_directory_the_tasks_cannot_share_fails_and_the_job_runs_on(
    job: Job, directory: str
) -> None:
    """`lockgate savepoint --dir` refuses these, but a request reaches the driver from
    whoever may write the job's keys (an older client, the job's own code): a stop
    into memory:// or a relative path left no savepoint anyone could restore, and the
    job stopped."""
    coordinator = job.coordinator(CheckpointConfig(interval_s=60, timeout_s=30))
    await coordinator.start()
    runner = asyncio.create_task(coordinator.run())
    try:
        request_id = await request_savepoint(
            job.store, job.keys, stop=True, directory=directory, expires_in_s=60
        )
        result = await await_savepoint(job.store, job.keys, request_id, 20)
        assert result.status == "failed"
        assert (result.error or "").startswith(f"{directory}: "), result.error
        assert not runner.done(), "the job was not stopped"
        assert job.subtasks[0].answered == [], "no savepoint was triggered"
    finally:
        runner.cancel()
        await coordinator.close()
