"""Retention of native incremental checkpoints, and where a restart restores from."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import posixpath
import shutil
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor, key_group
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.errors import NoUsableCheckpointError, RestoreBehindCommittedOutputError
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.records import encode
from lockgate.runtime.coordination.restore_point import resolve_relaunch_point, resolve_restore_point
from lockgate.runtime.snapshot.retention import referenced_shared_files
from lockgate.runtime.snapshot.storage import SnapshotCorruptError

from tests.runtime.coordination.running_job import Job
from tests.runtime.snapshot.test_corruption import flip_byte

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


async def test_restore_point_prefers_an_explicit_savepoint_then_the_latest(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
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
    with caplog.at_level(logging.WARNING):
        explicit = await resolve_restore_point(coordinator.store, savepoint.path)
    assert explicit is not None
    assert explicit.metadata.kind == "savepoint"
    # The user's choice, restored as named; what it writes again is said.
    assert (
        f"named by --from-savepoint, although checkpoint {latest.checkpoint_id} completed after it"
        in caplog.text
    )
    assert first.checkpoint_id == 1


async def test_a_damaged_latest_checkpoint_is_skipped_and_logged(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = await job.take_checkpoints(2)
    damaged = Path(job.storage.checkpoint_dir(job.keys.job, 2), "count", "1", "keyed")
    damaged.write_bytes(b"short")
    with caplog.at_level(logging.WARNING):
        point = await resolve_restore_point(coordinator.store, accept_duplicates=True)
    assert point is not None
    assert point.metadata.checkpoint_id == 1
    assert "skipping checkpoint 2" in caplog.text
    assert str(damaged) in caplog.text
    assert "the output of up to 1 epoch(s) the sinks committed after it is written again" in caplog.text


async def test_a_restore_behind_the_newest_completed_checkpoint_is_refused_by_default(job: Job) -> None:
    """Failed before: the damaged checkpoint 2 was skipped with a log line and checkpoint
    1 restored, writing again what checkpoint 2 had committed."""
    coordinator = await job.take_checkpoints(2)
    damaged = _keyed_file(job, 2, 1)
    damaged.write_bytes(b"short")
    with pytest.raises(RestoreBehindCommittedOutputError) as raised:
        await resolve_restore_point(coordinator.store)
    message = str(raised.value)
    older, newer = (job.storage.checkpoint_dir(job.keys.job, n) for n in (1, 2))
    assert f"the newest snapshot that can be restored is checkpoint 1 (file://{older})" in message
    assert "checkpoint 2 completed after it" in message
    assert f"checkpoint 2 (file://{newer}): snapshot file {damaged}: truncated" in message
    assert "--accept-duplicate-output" in message
    assert "--from-savepoint PATH" in message
    assert list(await coordinator.store.unusable.all()) == [2], "named and marked, as any damage"


async def test_an_older_checkpoint_copied_over_the_newest_is_not_restored(job: Job) -> None:
    """Failed before: whoever can write storage copied checkpoint 1 over checkpoint 2;
    its `_metadata` is signed, every file matched it, and "checkpoint 2" restored
    checkpoint 1's state and offsets."""
    coordinator = await job.take_checkpoints(2)
    older, newer = (job.storage.checkpoint_dir(job.keys.job, n) for n in (1, 2))
    shutil.rmtree(newer)
    shutil.copytree(older, newer)

    with pytest.raises(RestoreBehindCommittedOutputError) as raised:
        await resolve_restore_point(coordinator.store)
    reason = (
        f"checkpoint 2 (file://{newer}): snapshot file {newer}/_metadata: is not the one etcd "
        "recorded when this snapshot completed (its SHA-256 differs)"
    )
    assert reason in str(raised.value)
    marks = await coordinator.store.unusable.all()
    assert list(marks) == [2]
    assert "is not the one etcd recorded" in marks[2].reason

    point = await resolve_restore_point(coordinator.store, accept_duplicates=True)
    assert point is not None
    assert point.url == f"file://{older}", "the real checkpoint 1, accepted, not the copy"


async def test_a_record_without_a_digest_still_takes_only_a_metadata_signed_for_its_id(
    job: Job, etcd_config: EtcdConfig
) -> None:
    """A summary recorded before digests were: the id, job and namespace signed in
    `_metadata` are checked against it."""
    coordinator = await job.take_checkpoints(2)
    older, newer = (job.storage.checkpoint_dir(job.keys.job, n) for n in (1, 2))
    summary = (await coordinator.store.all())[-1]
    async with Etcd(etcd_config) as etcd:
        await etcd.put(job.keys.completed_of(2), encode(dataclasses.replace(summary, metadata_sha256=None)))
    shutil.rmtree(newer)
    shutil.copytree(older, newer)

    with pytest.raises(RestoreBehindCommittedOutputError) as raised:
        await resolve_restore_point(coordinator.store)
    assert (
        f"{newer}/_metadata: is signed as checkpoint 1 of job {job.keys.namespace}/{job.keys.job}, but "
        "etcd recorded this snapshot as checkpoint 2" in str(raised.value)
    )


async def test_a_named_savepoint_the_job_took_must_be_the_one_etcd_recorded(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30))
    await coordinator.start()
    try:
        first = await asyncio.wait_for(coordinator.trigger("savepoint", f"{job.savepoint_dir}/sp-1"), 10)
        second = await asyncio.wait_for(coordinator.trigger("savepoint", f"{job.savepoint_dir}/sp-2"), 10)
    finally:
        await coordinator.close()
    assert first.metadata_sha256 is not None
    second_dir = second.path.removeprefix("file://")
    shutil.copy(f"{first.path.removeprefix('file://')}/_metadata", f"{second_dir}/_metadata")

    with pytest.raises(SnapshotCorruptError, match="is not the one etcd recorded"):
        await resolve_restore_point(coordinator.store, second.path)
    # Spelled another way, it is still the savepoint etcd recorded.
    with pytest.raises(SnapshotCorruptError, match="is not the one etcd recorded"):
        await resolve_restore_point(coordinator.store, f"{second_dir}/")


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


async def test_a_named_savepoint_whose_summary_retention_forgot_is_held_to_its_result(job: Job) -> None:
    """Retention forgets a savepoint's summary; the request's result keeps its digest."""
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, retained=1))
    await coordinator.start()
    runner = asyncio.create_task(coordinator.run())
    try:
        taken = []
        for _ in range(2):
            request_id = await request_savepoint(job.store, job.keys, expires_in_s=60)
            taken.append(await await_savepoint(job.store, job.keys, request_id, 20))
        for _ in range(2):
            await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        runner.cancel()
        await coordinator.close()
    assert [c.kind for c in await coordinator.store.all()] == ["checkpoint"], "both summaries forgotten"
    first, second = (result.path.removeprefix("file://") for result in taken if result.path is not None)
    shutil.copy(f"{first}/_metadata", f"{second}/_metadata")

    with pytest.raises(SnapshotCorruptError, match="is not the one etcd recorded"):
        await resolve_restore_point(coordinator.store, f"file://{second}")
    assert (await resolve_restore_point(coordinator.store, f"file://{first}")) is not None


def _keyed_file(job: Job, checkpoint_id: int, subtask: int) -> Path:
    return Path(job.storage.checkpoint_dir(job.keys.job, checkpoint_id), "count", str(subtask), "keyed")


async def test_a_same_size_byte_flip_in_the_latest_checkpoint_is_found_and_skipped(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = await job.take_checkpoints(2)
    damaged = _keyed_file(job, 2, 1)
    size = damaged.stat().st_size
    flip_byte(str(damaged), size // 2)
    assert damaged.stat().st_size == size
    with caplog.at_level(logging.ERROR):
        point = await resolve_restore_point(coordinator.store, accept_duplicates=True)
    assert point is not None
    assert point.metadata.checkpoint_id == 1
    assert f"skipping checkpoint 2 ({point.url.removesuffix('chk-1')}chk-2)" in caplog.text
    assert f"snapshot file {damaged}: checksum mismatch" in caplog.text


async def test_when_no_checkpoint_verifies_the_error_names_each_and_the_ways_out(job: Job) -> None:
    coordinator = await job.take_checkpoints(2)
    for checkpoint_id in (1, 2):
        flip_byte(str(_keyed_file(job, checkpoint_id, 0)), 10)
    with pytest.raises(NoUsableCheckpointError) as raised:
        await resolve_restore_point(coordinator.store)
    message = str(raised.value)
    for checkpoint_id in (1, 2):
        directory = job.storage.checkpoint_dir(job.keys.job, checkpoint_id)
        assert (
            f"checkpoint {checkpoint_id} (file://{directory}): snapshot file {directory}/count/0/keyed"
            in message
        )
    assert message.count("checksum mismatch") == 2
    assert "--from-savepoint PATH" in message
    assert "--fresh" in message


async def test_a_damaged_checkpoint_is_marked_and_later_resolutions_skip_it(
    job: Job, etcd_config: EtcdConfig
) -> None:
    coordinator = await job.take_checkpoints(2)
    damaged = _keyed_file(job, 2, 0)
    flip_byte(str(damaged), 10)
    point = await resolve_restore_point(coordinator.store, accept_duplicates=True)
    assert point is not None
    assert point.metadata.checkpoint_id == 1

    # Another driver, on its own connection, finds the mark and does not try checkpoint 2
    # again, even though its bytes are back (a read that went wrong once is not trusted).
    flip_byte(str(damaged), 10)
    async with Etcd(etcd_config) as etcd:
        store = CompletedCheckpointStore(etcd, job.keys, job.storage, retained=5)
        marks = await store.unusable.all()
        assert list(marks) == [2]
        assert marks[2].path.endswith(f"/{job.keys.job}/chk-2")
        assert marks[2].reason == f"snapshot file {damaged}: checksum mismatch"
        again = await resolve_restore_point(store, accept_duplicates=True)
        assert again is not None
        assert again.metadata.checkpoint_id == 1

    # Starting over (--fresh) forgets the checkpoints and their marks alike.
    fresh = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30))
    await fresh.start()
    try:
        await fresh.store.discard_all(fresh.leadership.guard)
    finally:
        await fresh.close()
    assert await fresh.store.unusable.all() == {}


async def test_retention_forgets_the_mark_with_the_checkpoint(job: Job) -> None:
    coordinator = await job.take_checkpoints(2, retained=2)
    await coordinator.store.unusable.mark(1, job.storage.checkpoint_dir(job.keys.job, 1), "damaged")
    await job.take_checkpoints(1, retained=2)
    assert [c.checkpoint_id for c in await coordinator.store.all()] == [2, 3]
    assert await coordinator.store.unusable.all() == {}


async def test_a_relaunch_of_a_run_begun_from_a_savepoint_never_goes_back_before_it(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, retained=5))
    job.give_heap_state()
    await coordinator.start()
    try:
        await asyncio.wait_for(coordinator.trigger(), 10)  # of an earlier history
        savepoint = await asyncio.wait_for(
            coordinator.trigger("savepoint", f"{job.savepoint_dir}/savepoint-z"), 10
        )
        first_id = coordinator.next_checkpoint_id  # the run restored from the savepoint here
        for _ in range(2):
            await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    store = coordinator.store

    point = await resolve_relaunch_point(store, first_id, savepoint.path)
    assert point.metadata.checkpoint_id == first_id + 1

    for checkpoint_id in (first_id, first_id + 1):
        flip_byte(str(_keyed_file(job, checkpoint_id, 0)), 10)
    with pytest.raises(
        RestoreBehindCommittedOutputError, match=f"checkpoint {first_id + 1} completed after it"
    ):
        await resolve_relaunch_point(store, first_id, savepoint.path)
    point = await resolve_relaunch_point(store, first_id, savepoint.path, accept_duplicates=True)
    assert point.url == savepoint.path, "the savepoint, not the older checkpoint 1"

    flip_byte(str(Path(savepoint.path.removeprefix("file://"), "count", "0", "keyed")), 10)
    with pytest.raises(NoUsableCheckpointError) as raised:
        await resolve_relaunch_point(store, first_id, savepoint.path)
    message = str(raised.value)
    assert f"checkpoint {first_id + 1} (" in message
    assert f"checkpoint {first_id} (" in message
    assert f"savepoint {savepoint.path}: snapshot file" in message
    assert "checkpoint 1 (" not in message
