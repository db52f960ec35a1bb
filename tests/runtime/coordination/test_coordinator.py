"""The checkpoint coordinator against a real etcd, and on the in-memory control plane\nwith a clock the test moves where time decides: cycles, failures, retention."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.ack_seal import ack_key
from lockgate.runtime.coordination.coordinator import CheckpointConfig, JobPlan
from lockgate.runtime.coordination.errors import CheckpointAbortedError, JobFailedError
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger, decode
from lockgate.runtime.metrics.job_metrics import JobMetrics
from lockgate.runtime.snapshot.metadata import read_metadata

from tests.polling import eventually, eventually_true
from tests.runtime.coordination.running_job import COUNT, Job
from tests.vertex_snapshots import LocalSubtask, restore_vertex

MANUAL = CheckpointConfig(interval_s=None, timeout_s=30)


def _manual_clock(job: Job) -> ManualClock:
    assert isinstance(job.clock, ManualClock)
    return job.clock


async def test_normal_cycle_completes_and_is_restorable(job: Job) -> None:
    job.give_heap_state()
    participant = job.subtasks[0].participant(1)  # a task of the job's first launch
    completions = participant.completions(await participant.start_revision())
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        summary = await asyncio.wait_for(coordinator.trigger(), 10)
        published = await asyncio.wait_for(anext(completions), 10)
    finally:
        await coordinator.close()
    assert published == summary, "subtasks learn of the completion (sinks commit on it)"
    assert summary.checkpoint_id == 1
    assert summary.parallelism == {"source": 2, "count": 2}
    assert await job.store.get(job.keys.latest) == b"1"
    stored = decode(CompletedCheckpoint, await job.store.get(job.keys.completed_of(1)))  # type: ignore[arg-type]
    assert stored == summary
    assert await job.store.get_prefix(job.keys.acks) == []
    directory = job.storage.checkpoint_dir(job.keys.job, 1)
    metadata = read_metadata(job.storage, directory)
    assert metadata.vertices["count"].parallelism == 2

    restored = [LocalSubtask(HeapKeyedStateBackend(16, range(16)))]
    restore_vertex(job.storage, directory, "count", restored)
    values = []
    backend = restored[0].keyed
    assert backend is not None
    for key in range(100):
        backend.set_current_key(key)
        values.append(backend.state(COUNT).value())
    assert sorted(v for v in values if v)[:2] == [100, 101]


async def test_periodic_checkpoints_keep_the_retained_number(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=0.05, timeout_s=10, retained=2))
    await coordinator.start()
    runner = asyncio.create_task(coordinator.run())
    try:
        while (await asyncio.wait_for(coordinator.completed.get(), 10)).checkpoint_id < 4:
            pass
    finally:
        runner.cancel()
        await coordinator.close()
    ids = [c.checkpoint_id for c in await coordinator.store.all()]
    assert ids[-2:] == [ids[-1] - 1, ids[-1]]
    assert len(ids) == 2
    for old in range(1, ids[0]):
        assert not job.storage.exists(job.storage.checkpoint_dir(job.keys.job, old))


async def test_min_pause_and_max_concurrent_hold_back_triggers(manual_job: Job) -> None:
    clock = _manual_clock(manual_job)
    for subtask in manual_job.subtasks:
        subtask.gate.clear()
    config = CheckpointConfig(interval_s=2, timeout_s=60, max_concurrent=1, min_pause_s=1)
    coordinator = manual_job.coordinator(config)
    await coordinator.start()
    try:
        clock.advance(1_999)
        await coordinator.tick()
        assert not coordinator.pending, "the first checkpoint waits for the interval"
        clock.advance(1)
        await coordinator.tick()
        assert list(coordinator.pending) == [1]
        clock.advance(2_500)
        await coordinator.tick()
        assert list(coordinator.pending) == [1], "max_concurrent=1 allows one at a time"
        for subtask in manual_job.subtasks:
            subtask.gate.set()
        first = await asyncio.wait_for(coordinator.completed.get(), 10)
        clock.advance(999)
        await coordinator.tick()
        assert not coordinator.pending, "min_pause has not passed since the completion"
        clock.advance(1)
        await coordinator.tick()
        assert list(coordinator.pending) == [2]
        second = await asyncio.wait_for(coordinator.completed.get(), 10)
    finally:
        await coordinator.close()
    assert (first.checkpoint_id, second.checkpoint_id) == (1, 2)
    assert second.trigger_ms - first.completed_ms == 1_000, "min_pause separates completion and trigger"


async def test_ack_after_timeout_is_ignored(manual_job: Job) -> None:
    clock = _manual_clock(manual_job)
    slow = manual_job.subtasks[-1]
    slow.gate.clear()
    coordinator = manual_job.coordinator(CheckpointConfig(interval_s=None, timeout_s=5, tolerable_failures=5))
    await coordinator.start()
    try:
        first = coordinator.trigger()
        await eventually(lambda: len(coordinator.pending[1].acks) == 3, "every other subtask answered")
        clock.advance(4_999)
        await coordinator.tick()
        assert not first.done(), "the checkpoint is not due before its timeout"
        clock.advance(1)
        await coordinator.tick()
        with pytest.raises(CheckpointAbortedError, match="timed out"):
            await asyncio.wait_for(first, 10)
        storage = manual_job.storage
        assert not storage.exists(storage.checkpoint_dir(manual_job.keys.job, 1))
        slow.gate.set()  # the late acknowledgement arrives now
        await eventually(lambda: 1 in slow.answered, "the late acknowledgement is sent")
        second = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert second.checkpoint_id == 2
    assert [c.checkpoint_id for c in await coordinator.store.all()] == [2]
    assert await manual_job.store.get_prefix(manual_job.keys.acks) == []


async def test_declines_beyond_tolerable_failures_fail_the_job(job: Job) -> None:
    job.subtasks[0].decline = "source partition unreadable"
    coordinator = job.coordinator(CheckpointConfig(interval_s=0.05, timeout_s=10, tolerable_failures=2))
    await coordinator.start()
    try:
        with pytest.raises(JobFailedError, match=r"3 consecutive.*tolerable: 2.*source partition unreadable"):
            await asyncio.wait_for(coordinator.run(), 10)
    finally:
        await coordinator.close()
    assert await coordinator.store.all() == []


async def test_a_completion_resets_the_failure_count(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=10, tolerable_failures=1))
    await coordinator.start()
    try:
        job.subtasks[0].decline = "busy"
        with pytest.raises(CheckpointAbortedError, match="busy"):
            await asyncio.wait_for(coordinator.trigger(), 10)
        job.subtasks[0].decline = None
        await asyncio.wait_for(coordinator.trigger(), 10)
        job.subtasks[0].decline = "busy"
        with pytest.raises(CheckpointAbortedError):
            await asyncio.wait_for(coordinator.trigger(), 10)
        await coordinator.tick()  # one failure after a success is tolerated: no JobFailedError
    finally:
        await coordinator.close()


async def test_several_checkpoints_in_flight(job: Job) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=10))
    await coordinator.start()
    try:
        for subtask in job.subtasks:
            subtask.gate.clear()
        futures = [coordinator.trigger() for _ in range(3)]
        await eventually(
            lambda: all(p.published for p in coordinator.pending.values()), "the three triggers are out"
        )
        assert sorted(coordinator.pending) == [1, 2, 3], "none waits for another to complete"
        for subtask in job.subtasks:
            subtask.gate.set()
        done = await asyncio.wait_for(asyncio.gather(*futures), 10)
    finally:
        await coordinator.close()
    assert [c.checkpoint_id for c in done] == [1, 2, 3]


async def test_checkpoint_dir_is_under_the_job(job: Job, tmp_path: Path) -> None:
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        summary = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert summary.path == f"file://{tmp_path}/checkpoints/{job.keys.job}/chk-1"
    assert Path(tmp_path, "checkpoints", job.keys.job, "chk-1", "_metadata").exists()


async def test_unwritable_metadata_aborts_the_checkpoint_and_counts_as_a_failure(job: Job) -> None:
    # A file where the checkpoint's directory must go (the subtasks have no state
    # files to write): the storage refuses to create it.
    blocker = Path(job.storage.root, job.keys.job, "chk-1")
    blocker.parent.mkdir(parents=True)
    blocker.touch()
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=10))
    await coordinator.start()
    try:
        with pytest.raises(CheckpointAbortedError, match="writing its _metadata failed"):
            await asyncio.wait_for(coordinator.trigger(), 10)
        with pytest.raises(JobFailedError, match="checkpoint 1 writing its _metadata failed"):
            await asyncio.wait_for(coordinator.run(), 10)
    finally:
        await coordinator.close()
    assert await coordinator.store.all() == []


async def test_the_driver_metrics_count_what_the_coordinator_reports(job: Job) -> None:
    metrics = JobMetrics(job.keys, MANUAL, parallelism=2)
    coordinator = job.coordinator(MANUAL, listener=metrics)
    await coordinator.start()
    try:
        completed = await asyncio.wait_for(coordinator.trigger(), 10)
        job.subtasks[0].decline = "busy"
        with pytest.raises(CheckpointAbortedError):
            await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    job_labels = {"job_namespace": job.keys.namespace, "job_id": job.keys.job}
    checkpoints = {**job_labels, "kind": "checkpoint"}

    def sample(name: str, labels: dict[str, str]) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("lockgate_checkpoints_completed_total", checkpoints) == 1.0
    assert sample("lockgate_checkpoints_failed_total", checkpoints) == 1.0
    assert sample("lockgate_checkpoints_completed_total", {**job_labels, "kind": "savepoint"}) == 0.0
    assert sample("lockgate_checkpoint_duration_seconds_count", checkpoints) == 1.0
    assert sample("lockgate_checkpoint_size_bytes", job_labels) == completed.bytes
    assert sample("lockgate_last_checkpoint_completed_timestamp_seconds", job_labels) == (
        completed.completed_ms / 1000
    )
    assert sample("lockgate_restarts_total", job_labels) == 0.0


async def test_a_completed_checkpoint_subsumes_older_pending_ones(etcd, keys, tmp_path: Path) -> None:
    """With concurrent checkpoints, the acks of an older one can arrive after a newer
    one completed: it must not complete then and move `latest` back."""
    job = Job(etcd, keys, tmp_path, JobPlan({"source": 1, "count": 1}, 8))
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, max_concurrent=2))
    await coordinator.start()
    try:
        older, newer = coordinator.trigger(), coordinator.trigger()
        await eventually_true(lambda: _published(job, 2), "both triggers are published")
        triggers = [coordinator.pending[n].trigger for n in (1, 2)]
        for subtask in job.subtasks:
            await subtask.answer(triggers[1])
        completed = await asyncio.wait_for(newer, 10)
        for subtask in job.subtasks:
            await subtask.answer(triggers[0])
        with pytest.raises(CheckpointAbortedError, match="subsumed by checkpoint 2"):
            await asyncio.wait_for(older, 10)
        assert coordinator._consecutive_failures == 0, "a subsumed checkpoint is no failure"
    finally:
        await coordinator.close()
    assert completed.checkpoint_id == 2
    assert await etcd.get(keys.latest) == b"2"
    assert [c.checkpoint_id for c in await coordinator.store.all()] == [2]


async def _published(job: Job, n: int) -> bool:
    data = await job.store.get(job.keys.trigger)
    return data is not None and decode(Trigger, data).checkpoint_id == n


async def test_a_late_acknowledgement_of_an_earlier_launch_is_no_alarm_and_aborts_nothing(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier launch's task acknowledging its own checkpoint after this launch's
    coordinator started: sealed with that launch's key, for an id this launch never
    triggered. Failed before: logged as a forgery ("something else wrote it")."""
    job.give_heap_state()
    job.ack_key = ack_key(b"this launch's secret")
    for subtask in job.subtasks:
        subtask.ack_key = job.ack_key
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    late, *_ = job.subtasks
    late.ack_key = ack_key(b"the earlier launch's secret")
    try:
        target = f"file://{job.storage.checkpoint_dir(job.keys.job, 99)}"
        earlier = Trigger(99, coordinator.launch - 1, "checkpoint", target, 0)
        with caplog.at_level(logging.INFO, logger="lockgate.runtime.coordination.coordinator"):
            await late.answer(earlier)
            await eventually(
                lambda: "did not trigger" in caplog.text, "the late acknowledgement seen", timeout_s=10
            )
        late.ack_key = job.ack_key
        summary = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert "something else wrote it" not in caplog.text
    assert summary.checkpoint_id == 1


async def test_an_acknowledgement_the_run_did_not_seal_is_refused_before_its_files_are_signed(
    job: Job,
) -> None:
    """Acknowledgements name the files `_metadata` will sign; one written to etcd by
    anything but the run's own tasks (another job's code, say) must not be taken."""
    job.give_heap_state()
    job.ack_key = ack_key(b"the run's secret")
    forger, *honest = job.subtasks
    for subtask in honest:
        subtask.ack_key = job.ack_key
    forger.ack_key = ack_key(b"a guess")
    coordinator = job.coordinator(MANUAL)
    await coordinator.start()
    try:
        with pytest.raises(CheckpointAbortedError, match=f"{forger.vertex}/{forger.index} is not this run's"):
            await asyncio.wait_for(coordinator.trigger(), 10)
        assert not job.storage.exists(f"{job.storage.checkpoint_dir(job.keys.job, 1)}/_metadata")
        forger.ack_key = None  # unsealed: refused the same
        with pytest.raises(CheckpointAbortedError, match="is not this run's"):
            await asyncio.wait_for(coordinator.trigger(), 10)
        forger.ack_key = job.ack_key
        summary = await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    assert summary.checkpoint_id == 3
