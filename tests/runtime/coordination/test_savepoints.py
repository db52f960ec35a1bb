"""Savepoint requests in etcd: round trip, idempotence, queueing, stop."""

from __future__ import annotations

import asyncio

from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.records import SavepointResult, decode
from lockgate.runtime.coordination.savepoint_client import await_savepoint, request_savepoint
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.polling import eventually
from tests.runtime.coordination.conftest import Job

MANUAL = CheckpointConfig(interval_s=None, timeout_s=30)


async def test_savepoint_request_round_trip(job: Job, tmp_path) -> None:
    counting = job.subtasks[-1]
    counting.keyed = RocksDBKeyedStateBackend(16, range(8, 16), tmp_path / "rocks", incremental=True)
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    runner = asyncio.create_task(coordinator.run())
    try:
        request_id = await request_savepoint(job.etcd, job.keys)
        result = await await_savepoint(job.etcd, job.keys, request_id, 20)
        assert not runner.done(), "a savepoint without stop leaves the job running"
    finally:
        runner.cancel()
        await coordinator.close()
    assert result.status == "completed"
    assert result.path == f"{job.savepoint_dir}/savepoint-{request_id}"
    storage = CheckpointStorage(result.path)
    metadata = read_metadata(storage, storage.root)
    assert metadata.kind == "savepoint"
    handle = metadata.vertices["count"].subtasks[1].keyed
    assert isinstance(handle, CanonicalKeyedHandle), "savepoints are canonical even on RocksDB"


async def test_the_same_request_id_is_served_once(job: Job) -> None:
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        await request_savepoint(job.etcd, job.keys, request_id="nightly")
        first = await await_savepoint(job.etcd, job.keys, "nightly", 20)
        await request_savepoint(job.etcd, job.keys, request_id="nightly")  # written again
        later = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert first.checkpoint_id == 1
    assert later.checkpoint_id == 2, "no second savepoint was taken for the same id"
    stored = decode(SavepointResult, await job.etcd.get(job.keys.savepoint_result("nightly")))  # type: ignore[arg-type]
    assert stored == first


async def test_a_second_request_waits_its_turn(job: Job) -> None:
    for subtask in job.subtasks:
        subtask.gate.clear()
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        await request_savepoint(job.etcd, job.keys, request_id="first")
        await request_savepoint(job.etcd, job.keys, request_id="second")
        await eventually(lambda: bool(coordinator.pending), "the first savepoint is triggered")
        await asyncio.sleep(0.1)
        assert [p.trigger.target.rsplit("/", 1)[1] for p in coordinator.pending.values()] == [
            "savepoint-first"
        ]
        for subtask in job.subtasks:
            subtask.gate.set()
        first = await await_savepoint(job.etcd, job.keys, "first", 20)
        second = await await_savepoint(job.etcd, job.keys, "second", 20)
    finally:
        await coordinator.close()
    assert (first.checkpoint_id, second.checkpoint_id) == (1, 2)


async def test_stop_with_savepoint_ends_the_run_with_its_path(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=60, timeout_s=30))
    await coordinator.start()
    try:
        request_id = await request_savepoint(job.etcd, job.keys, stop=True)
        path = await asyncio.wait_for(coordinator.run(), 20)
    finally:
        await coordinator.close()
    assert path == f"{job.savepoint_dir}/savepoint-{request_id}"
    trigger = job.subtasks[0].answered
    assert trigger == [1]


async def test_savepoint_without_a_directory_fails_with_the_reason(job: Job) -> None:
    job.savepoint_dir = None  # type: ignore[assignment]
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        request_id = await request_savepoint(job.etcd, job.keys)
        result = await await_savepoint(job.etcd, job.keys, request_id, 20)
    finally:
        await coordinator.close()
    assert result.status == "failed"
    assert "savepoints.dir" in (result.error or "")


async def test_failed_savepoint_reports_the_error(job: Job) -> None:
    job.subtasks[1].decline = "sink cannot pre-commit"
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        request_id = await request_savepoint(job.etcd, job.keys, directory=job.savepoint_dir)
        result = await await_savepoint(job.etcd, job.keys, request_id, 20)
    finally:
        await coordinator.close()
    assert result.status == "failed"
    assert "sink cannot pre-commit" in (result.error or "")
