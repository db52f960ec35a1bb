"""Retention of native incremental checkpoints, and where a restart restores from."""

from __future__ import annotations

import asyncio
import logging
import posixpath
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor, key_group
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.restore_point import resolve_restore_point
from lockgate.runtime.snapshot.retention import referenced_shared_files
from lockgate.runtime.snapshot.storage import SnapshotCorruptError

from tests.runtime.coordination.conftest import Job

COUNT = ValueStateDescriptor("count", default=0)


def _rocksdb_state(job: Job, tmp_path: Path) -> list[RocksDBKeyedStateBackend]:
    backends = []
    for subtask in job.subtasks:
        if subtask.vertex == "count":
            index = subtask.index
            groups = range(index * 8, index * 8 + 8)
            backend = RocksDBKeyedStateBackend(16, groups, tmp_path / "db", incremental=True)
            subtask.keyed = backend
            backends.append(backend)
    return backends


def _write(backends: list[RocksDBKeyedStateBackend], round_: int) -> None:
    for backend in backends:
        count = backend.state(COUNT)
        for key in range(round_ * 500, round_ * 500 + 1500):
            if key_group(key, 16) in backend.key_groups:
                backend.set_current_key(key)
                count.update(round_)
        backend.column_family("count").compact_range(None, None)


async def test_retention_deletes_exactly_what_no_retained_checkpoint_needs(job: Job, tmp_path: Path) -> None:
    backends = _rocksdb_state(job, tmp_path)
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, retained=2))
    await coordinator.start()
    try:
        for round_ in range(1, 6):
            _write(backends, round_)
            await asyncio.wait_for(coordinator.trigger(), 20)
    finally:
        await coordinator.close()
    kept = [c.checkpoint_id for c in await coordinator.store.all()]
    assert kept == [4, 5]
    shared = job.storage.shared_dir(job.keys.job)
    present = {posixpath.join(shared, name) for name in job.storage.list_names(shared)}
    assert present == referenced_shared_files(job.storage, job.keys.job, kept)
    for gone in (1, 2, 3):
        assert not job.storage.exists(job.storage.checkpoint_dir(job.keys.job, gone))


async def test_restore_point_prefers_an_explicit_savepoint_then_the_latest(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, retained=3))
    await coordinator.start()
    try:
        assert await resolve_restore_point(coordinator.store) is None  # nothing yet: empty state
        first = await asyncio.wait_for(coordinator.trigger(), 10)
        savepoint = await asyncio.wait_for(
            coordinator.trigger("savepoint", f"{job.savepoint_dir}/savepoint-x"), 10
        )
        latest = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    point = await resolve_restore_point(coordinator.store)
    assert point is not None
    assert point.metadata.checkpoint_id == latest.checkpoint_id
    explicit = await resolve_restore_point(coordinator.store, savepoint.path)
    assert explicit is not None
    assert explicit.metadata.kind == "savepoint"
    assert first.checkpoint_id == 1


async def test_a_damaged_latest_checkpoint_is_skipped_and_logged(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = await job.take_checkpoints(2)
    damaged = Path(job.storage.checkpoint_dir(job.keys.job, 2), "count", "1", "keyed")
    damaged.write_bytes(b"short")
    with caplog.at_level(logging.ERROR):
        point = await resolve_restore_point(coordinator.store)
    assert point is not None
    assert point.metadata.checkpoint_id == 1
    assert "skipping checkpoint 2" in caplog.text
    assert str(damaged) in caplog.text


async def test_a_damaged_explicit_savepoint_is_an_error(job: Job, tmp_path: Path) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30))
    await coordinator.start()
    try:
        savepoint = await asyncio.wait_for(
            coordinator.trigger("savepoint", f"{job.savepoint_dir}/savepoint-y"), 10
        )
    finally:
        await coordinator.close()
    Path(savepoint.path.removeprefix("file://"), "_metadata").unlink()
    with pytest.raises(SnapshotCorruptError, match="_metadata: missing"):
        await resolve_restore_point(coordinator.store, savepoint.path)
