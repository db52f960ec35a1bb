"""A coordinator and subtasks that answer its triggers, against a control plane
(a real etcd, or the in-memory store with a clock the test moves) and real
storage: what the coordination tests run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.clock import Clock
from lockgate.runtime.coordination.coordinator import (
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointListener,
    JobPlan,
)
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.participant import CheckpointParticipant
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger, decode
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, snapshot_subtask

COUNT = ValueStateDescriptor("count", default=0)


@dataclass
class Subtask:
    """A subtask that snapshots its real state into the trigger's target and acks,
    as a task of the launch whose coordinator triggered it (a launch starts its
    tasks anew; these stand in for each launch's tasks in turn)."""

    store: KeyValueStore
    keys: JobKeys
    vertex: str
    index: int
    keyed: CheckpointableKeyedStateBackend | None = None
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    decline: str | None = None
    answered: list[int] = field(default_factory=list)
    ack_key: bytes | None = None  # the run's seal on its acknowledgements (None: unsealed)

    def __post_init__(self) -> None:
        self.gate.set()

    def participant(self, launch: int) -> CheckpointParticipant:
        return CheckpointParticipant(
            self.store, self.keys, self.vertex, self.index, launch, ack_key=self.ack_key
        )

    async def answer(self, trigger: Trigger) -> None:
        await self.gate.wait()
        participant = self.participant(trigger.launch)
        if self.decline is not None:
            await participant.decline(trigger, self.decline)
            return
        storage = CheckpointStorage(trigger.target)
        target = SnapshotTarget(storage, storage.root, self.vertex, self.index)
        pending = snapshot_subtask(target, trigger.checkpoint_id, trigger.kind, self.keyed, None)
        state = await asyncio.to_thread(pending.complete)
        await participant.acknowledge(trigger, state)
        self.answered.append(trigger.checkpoint_id)

    async def serve(self, start_revision: int) -> None:
        last = 0
        async for event in self.store.watch_prefix(self.keys.trigger, start_revision):
            trigger = None if event.deleted else decode(Trigger, event.value)
            if trigger is not None and trigger.checkpoint_id > last:
                last = trigger.checkpoint_id
                await self.answer(trigger)

    async def follow_completions(self, start_revision: int) -> None:
        async for event in self.store.watch_prefix(self.keys.completed, start_revision):
            completed = None if event.deleted else decode(CompletedCheckpoint, event.value)
            if completed is not None and self.keyed is not None and completed.kind == "checkpoint":
                self.keyed.notify_checkpoint_complete(completed.checkpoint_id)


class Job:
    """A coordinator and its subtasks, all against one control plane and real storage;
    the coordinators it makes read `clock` (None: the system's)."""

    def __init__(
        self, store: KeyValueStore, keys: JobKeys, tmp_path: Path, plan: JobPlan, clock: Clock | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.keys = keys
        self.plan = plan
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
        self.savepoint_dir = f"file://{tmp_path}/savepoints"
        self.subtasks = [
            Subtask(store, keys, vertex, index)
            for vertex, parallelism in plan.vertices.items()
            for index in range(parallelism)
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self.ack_key: bytes | None = None  # the coordinator's: acknowledgements it accepts

    def coordinator(
        self, config: CheckpointConfig, lease_ttl_s: int = 10, listener: CheckpointListener | None = None
    ) -> CheckpointCoordinator:
        return CheckpointCoordinator(
            self.store,
            self.keys,
            self.storage,
            self.plan,
            config,
            savepoint_dir=self.savepoint_dir,
            lease_ttl_s=lease_ttl_s,
            listener=listener,
            ack_key=self.ack_key,
            clock=self.clock,
        )

    def give_heap_state(self) -> None:
        """Each `count` subtask gets a heap backend with one key of value 100 + index."""
        for subtask in self.subtasks:
            if subtask.vertex == "count":
                index = subtask.index
                groups = key_group_range(self.plan.max_parallelism, self.plan.vertices["count"], index)
                backend = HeapKeyedStateBackend(self.plan.max_parallelism, groups)
                key = next(k for k in range(1000) if key_group(k, self.plan.max_parallelism) in groups)
                backend.set_current_key(key)
                backend.state(COUNT).update(100 + index)
                subtask.keyed = backend

    async def take_checkpoints(self, count: int, retained: int = 5) -> CheckpointCoordinator:
        """Run a coordinator for `count` checkpoints of heap state, then close it."""
        self.give_heap_state()
        config = CheckpointConfig(interval_s=None, timeout_s=30, retained=retained)
        coordinator = self.coordinator(config)
        await coordinator.start()
        try:
            for _ in range(count):
                await asyncio.wait_for(coordinator.trigger(), 10)
        finally:
            await coordinator.close()
        return coordinator

    async def start_subtasks(self) -> None:
        revision = await self.subtasks[0].participant(0).start_revision()
        for subtask in self.subtasks:
            self._tasks.append(asyncio.create_task(subtask.serve(revision)))
            self._tasks.append(asyncio.create_task(subtask.follow_completions(revision)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
