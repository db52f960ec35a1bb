"""The subtask side of checkpoint coordination: triggers in, acknowledgements out.

A participant belongs to one launch. It takes triggers and completions of that
launch only, and its acknowledgements carry that launch, never the trigger's:
a task of an earlier launch (an executor cut off and back) can neither answer
nor commit for the current one, and the coordinator refuses what it sends."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from lockgate.runtime.coordination.ack_seal import seal
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.records import Ack, CompletedCheckpoint, Trigger, decode, encode
from lockgate.runtime.snapshot.metadata import SubtaskState

log = logging.getLogger(__name__)


class CheckpointParticipant:
    def __init__(
        self,
        store: KeyValueStore,
        keys: JobKeys,
        vertex: str,
        subtask: int,
        launch: int,
        *,
        ack_key: bytes | None = None,
    ) -> None:
        self._ack_key = ack_key  # seals its acknowledgements (`ack_seal.py`); None: unsealed
        self._store = store
        self._keys = keys
        self.vertex = vertex
        self.subtask = subtask
        self.launch = launch

    async def start_revision(self) -> int:
        """Watch from here to miss nothing published after this call."""
        _, revision = await self._store.get_prefix_at(self._keys.trigger)
        return revision + 1

    async def triggers(self, start_revision: int) -> AsyncIterator[Trigger]:
        """This launch's triggers published from `start_revision` on, each once, in order."""
        last = 0
        async for event in self._store.watch_prefix(self._keys.trigger, start_revision):
            if event.deleted or event.key != self._keys.trigger:
                continue
            trigger = decode(Trigger, event.value)
            if trigger.launch != self.launch:
                log.warning(
                    "task %s of launch %s ignores checkpoint %s of launch %s",
                    self.subtask, self.launch, trigger.checkpoint_id, trigger.launch,
                )  # fmt: skip
                continue
            if trigger.checkpoint_id > last:
                last = trigger.checkpoint_id
                yield trigger

    async def completions(self, start_revision: int) -> AsyncIterator[CompletedCheckpoint]:
        """This launch's completed checkpoints, so two-phase-commit sinks can commit
        their epochs (what an earlier launch completed, a restore commits)."""
        async for event in self._store.watch_prefix(self._keys.completed, start_revision):
            if (
                not event.deleted
                and (completed := decode(CompletedCheckpoint, event.value)).launch == self.launch
            ):
                yield completed

    async def acknowledge(
        self, trigger: Trigger, state: SubtaskState, drained: bool = False, records: int = 0
    ) -> None:
        ack = Ack(trigger.checkpoint_id, self.launch, state=state, drained=drained, records=records)
        await self._put(trigger, ack)

    async def decline(self, trigger: Trigger, reason: str) -> None:
        await self._put(trigger, Ack(trigger.checkpoint_id, self.launch, declined=reason))

    async def _put(self, trigger: Trigger, ack: Ack) -> None:
        key, record = self._keys.ack(trigger.checkpoint_id, self.vertex, self.subtask), encode(ack)
        await self._store.put(key, record if self._ack_key is None else seal(self._ack_key, key, record))
