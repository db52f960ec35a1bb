"""The subtask side of checkpoint coordination: triggers in, acknowledgements out."""

from __future__ import annotations

from collections.abc import AsyncIterator

from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import (
    Ack,
    CompletedCheckpoint,
    Trigger,
    decode,
    encode,
)
from lockgate.runtime.snapshot.metadata import SubtaskState


class CheckpointParticipant:
    def __init__(self, etcd: Etcd, keys: JobKeys, vertex: str, subtask: int) -> None:
        self._etcd = etcd
        self._keys = keys
        self.vertex = vertex
        self.subtask = subtask

    async def start_revision(self) -> int:
        """Watch from here to miss nothing published after this call."""
        _, revision = await self._etcd.get_prefix_at(self._keys.trigger)
        return revision + 1

    async def triggers(self, start_revision: int) -> AsyncIterator[Trigger]:
        """Triggers published from `start_revision` on, each once, in order."""
        last = 0
        async for event in self._etcd.watch_prefix(self._keys.trigger, start_revision):
            if event.deleted or event.key != self._keys.trigger:
                continue
            trigger = decode(Trigger, event.value)
            if trigger.checkpoint_id > last:
                last = trigger.checkpoint_id
                yield trigger

    async def completions(self, start_revision: int) -> AsyncIterator[CompletedCheckpoint]:
        """Completed checkpoints, so two-phase-commit sinks can commit their epochs."""
        async for event in self._etcd.watch_prefix(self._keys.completed, start_revision):
            if not event.deleted:
                yield decode(CompletedCheckpoint, event.value)

    async def acknowledge(self, trigger: Trigger, state: SubtaskState, drained: bool = False) -> None:
        ack = Ack(trigger.checkpoint_id, trigger.epoch, state=state, drained=drained)
        await self._etcd.put(self._key(trigger), encode(ack))

    async def decline(self, trigger: Trigger, reason: str) -> None:
        ack = Ack(trigger.checkpoint_id, trigger.epoch, declined=reason)
        await self._etcd.put(self._key(trigger), encode(ack))

    def _key(self, trigger: Trigger) -> bytes:
        return self._keys.ack(trigger.checkpoint_id, self.vertex, self.subtask)
