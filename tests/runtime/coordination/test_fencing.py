"""A deposed coordinator touches nothing of its successor's: paused past its lease
(SIGSTOP, a long GC, a stalled VM), then resumed, against real etcd and storage."""

from __future__ import annotations

import asyncio

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.errors import CheckpointAbortedError
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.participant import CheckpointParticipant
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger, decode
from lockgate.runtime.coordination.restore_point import resolve_restore_point

from tests.polling import eventually, eventually_true
from tests.runtime.coordination.pausable import PausableCoordinator
from tests.runtime.coordination.running_job import Job
from tests.runtime.coordination.test_failover import _wait_until_deleted

MANUAL = CheckpointConfig(interval_s=None, timeout_s=60)


async def _outcome(future: asyncio.Future[CompletedCheckpoint]) -> BaseException | CompletedCheckpoint:
    try:
        return await future
    except CheckpointAbortedError as error:
        return error


async def test_a_coordinator_paused_past_its_lease_destroys_nothing_of_its_successor(job: Job) -> None:
    paused = PausableCoordinator(job, MANUAL, lease_ttl_s=2)
    try:
        await paused.wait(paused.coordinator.start())
        # Paused with a trigger queued but not yet published, as a GC pause can catch it.
        stale = await paused.pause_after(paused.coordinator.trigger)
        await asyncio.wait_for(_wait_until_deleted(job.store, job.keys.coordinator), 10)

        successor = job.coordinator(MANUAL)
        await successor.start()
        try:
            completed = await asyncio.wait_for(successor.trigger(), 10)
            paused.resume()
            outcome = await paused.wait(_outcome(stale))
            assert isinstance(outcome, CheckpointAbortedError), "the deposed coordinator's trigger is aborted"

            assert await job.store.get(job.keys.latest) == str(completed.checkpoint_id).encode()
            restore = await resolve_restore_point(successor.store)
            assert restore is not None, "the successor's checkpoint is still there to restore"
            assert restore.metadata.checkpoint_id == completed.checkpoint_id
            assert job.storage.exists(f"{completed.path}/_metadata")
            after = await asyncio.wait_for(successor.trigger(), 10)
            assert after.checkpoint_id > completed.checkpoint_id
        finally:
            await successor.close()
    finally:
        paused.stop()


async def test_a_published_id_is_never_reused_by_a_successor(job: Job) -> None:
    """The deposed coordinator's published trigger keeps its id: the successor's
    checkpoints are numbered after it, whatever became of it."""
    for subtask in job.subtasks:
        subtask.gate.clear()  # nobody answers the first launch's trigger
    paused = PausableCoordinator(job, MANUAL, lease_ttl_s=2)
    try:
        await paused.wait(paused.coordinator.start())
        stale = await paused.wait(_published(paused))
        await paused.pause_after(lambda: None)
        await asyncio.wait_for(_wait_until_deleted(job.store, job.keys.coordinator), 10)
        for subtask in job.subtasks:
            subtask.gate.set()

        successor = job.coordinator(MANUAL)
        await successor.start()
        try:
            completed = await asyncio.wait_for(successor.trigger(), 10)
        finally:
            await successor.close()
        assert successor.launch == paused.coordinator.launch + 1
        assert completed.checkpoint_id > stale.checkpoint_id
        assert completed.launch == successor.launch
        assert await job.store.get(job.keys.last_checkpoint_id) == str(completed.checkpoint_id).encode()
    finally:
        paused.stop()


async def _published(paused: PausableCoordinator) -> Trigger:
    coordinator = paused.coordinator
    coordinator.trigger()
    await eventually_true(lambda: _has(paused.etcd, coordinator.keys.trigger), "the trigger reached etcd", 10)
    data = await paused.etcd.get(coordinator.keys.trigger)
    assert data is not None
    return decode(Trigger, data)


async def _has(store: KeyValueStore, key: bytes) -> bool:
    return await store.get(key) is not None


async def test_an_acknowledgement_from_an_earlier_launch_is_refused(job: Job) -> None:
    """A task of launch 1 (an executor cut off and back) answers launch 2's trigger:
    the coordinator refuses it, and the checkpoint completes only with launch 2's."""
    first = job.coordinator(MANUAL)
    await first.start()
    await first.close()
    held = job.subtasks[2]  # count/0
    held.gate.clear()
    current = job.coordinator(MANUAL)
    await current.start()
    try:
        done = current.trigger()
        await eventually(lambda: len(current.pending[1].acks) == 3, "every other subtask answered")
        trigger = current.pending[1].trigger
        stale = CheckpointParticipant(job.store, job.keys, held.vertex, held.index, first.launch)
        await stale.acknowledge(trigger, current.pending[1].acks[("count", 1)])
        key = job.keys.ack(1, held.vertex, held.index)
        await eventually_true(lambda: _absent(job, key), "the coordinator removed the refused ack")
        assert ("count", 0) not in current.pending[1].acks
        assert not done.done()
        held.gate.set()
        summary = await asyncio.wait_for(done, 10)
    finally:
        await current.close()
    assert summary.launch == current.launch == first.launch + 1


async def _absent(job: Job, key: bytes) -> bool:
    return await job.store.get(key) is None


async def test_a_task_of_an_earlier_launch_sees_no_trigger_or_completion_of_the_current_one(job: Job) -> None:
    first = job.coordinator(MANUAL)
    await first.start()
    await first.close()
    current = job.coordinator(MANUAL)
    await current.start()
    try:
        revision = current.trigger_revision
        stale = CheckpointParticipant(job.store, job.keys, "count", 0, first.launch)
        ours = CheckpointParticipant(job.store, job.keys, "count", 0, current.launch)
        seen_by_ours = [anext(ours.triggers(revision)), anext(ours.completions(revision))]
        seen_by_stale = asyncio.gather(anext(stale.triggers(revision)), anext(stale.completions(revision)))
        await asyncio.wait_for(current.trigger(), 10)
        trigger, completed = await asyncio.wait_for(asyncio.gather(*seen_by_ours), 10)
        # Both watches start from one revision: what reached this launch's task by now
        # had reached the stale one's too, had it been let through.
        done, _ = await asyncio.wait({seen_by_stale}, timeout=1)
        assert not done, "a task of launch 1 took launch 2's trigger or completion"
        seen_by_stale.cancel()
    finally:
        await current.close()
    assert (trigger.launch, completed.launch) == (current.launch, current.launch)
