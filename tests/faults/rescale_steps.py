"""The steps of an in-place rescale as etcd shows them, for a fault injected at a
chosen one (runtime/coordination/rescale_queue.py serves the request; the job
master relaunches at the target):

- `taken-up`: a driver answered the request `pending` (it checks the target and
  reserves what it needs while the old tasks run on);
- `stop-triggered`: the request says when the tasks were told to stop and the
  trigger that stops them is published (a checkpoint trigger with its stop flag);
- `stop-completed`: that checkpoint completed: the old tasks end;
- `relaunched`: a launch number above the stopped launch's was allocated (the
  relaunch's coordinator, which answers `rescaled` next);
- `resumed`: the relaunch completed its first checkpoint: every new task runs.

The steps are read from one etcd watch of the job's keys, in revision order, so
a step is seen as soon as etcd has it, never guessed by a sleep. A driver that
takes the request up again (a new driver, or a relaunch after a failed launch)
starts the steps over."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_requests import request_rescale
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import WatchEvent
from lockgate.runtime.coordination.records import RescaleResult, Trigger, decode

RescaleStep = Literal["taken-up", "stop-triggered", "stop-completed", "relaunched", "resumed"]
STEPS: tuple[RescaleStep, ...] = ("taken-up", "stop-triggered", "stop-completed", "relaunched", "resumed")


@dataclass
class RescaleSteps:
    """What etcd showed of one rescale request, from just before it was written."""

    keys: JobKeys
    request_id: str
    revision: int  # the last revision seen: a later watch goes on from the next
    launch: int  # the newest launch number seen
    started: float = field(default_factory=time.monotonic)
    seen: list[tuple[str, float]] = field(default_factory=list)  # (step or answer, monotonic time)
    result: RescaleResult | None = None  # the final answer, once there is one
    _stopping: bool = False  # the request says the tasks were told to stop
    _stop_checkpoint: int | None = None
    _stopped_launch: int | None = None  # the launch whose tasks the stop checkpoint ended
    _relaunch: int | None = None

    @property
    def relaunch(self) -> int | None:
        """The relaunch's launch number, once `relaunched` was seen."""
        return self._relaunch

    def reached(self, step: RescaleStep) -> bool:
        return any(seen == step for seen, _ in self.seen)

    def over_before(self, step: RescaleStep) -> bool:
        """The request was answered and `step` will not come: refused, failed, already
        at the target, or (before `resumed`) rescaled."""
        if self.result is None:
            return False
        if step == "resumed":
            return self.result.status != "rescaled" or self.result.checkpoint_id is None
        return True

    def describe(self, since: float) -> str:
        """The steps and answers in order, in seconds from `since` (negative: before it)."""
        return ", ".join(f"{what} {at - since:+.2f} s" for what, at in self.seen) or "none"

    def see(self, event: WatchEvent) -> None:
        self.revision = event.revision
        if event.deleted:
            return
        keys = self.keys
        if event.key == keys.rescale_result(self.request_id):
            self._answered(decode(RescaleResult, event.value))
        elif event.key == keys.trigger:
            trigger = decode(Trigger, event.value)
            if self._stopping and self._stop_checkpoint is None and trigger.stop:
                self._stop_checkpoint = trigger.checkpoint_id
                self._step("stop-triggered")
        elif event.key == keys.launch:
            self.launch = int(event.value)
            if (
                self._stopped_launch is not None
                and self._relaunch is None
                and self.launch > self._stopped_launch
            ):
                self._relaunch = self.launch
                self._step("relaunched")
        elif event.key.startswith(keys.completed) and self._stop_checkpoint is not None:
            completed = int(event.key[len(keys.completed) :])
            if completed == self._stop_checkpoint and self._stopped_launch is None:
                self._stopped_launch = self.launch
                self._step("stop-completed")
            elif (
                self._relaunch is not None
                and completed > self._stop_checkpoint
                and not self.reached("resumed")
            ):
                self._step("resumed")

    def _answered(self, result: RescaleResult) -> None:
        if result.status != "pending":
            self.result = result
            self.seen.append((f"answered {result.status}", time.monotonic()))
        elif result.stopped_ms is None:
            # Taken up (again): the steps start over.
            self._stopping, self._stop_checkpoint, self._stopped_launch, self._relaunch = (
                False,
                None,
                None,
                None,
            )
            self._step("taken-up")
        else:
            self._stopping = True

    def _step(self, step: RescaleStep) -> None:
        self.seen.append((step, time.monotonic()))


async def request_watched(etcd: Etcd, keys: JobKeys, target: int, expires_in_s: float) -> RescaleSteps:
    """Request a rescale to `target`; the steps to follow from just before the request."""
    launch, revision = await etcd.get_prefix_at(keys.launch)
    request_id = await request_rescale(etcd, keys, target, expires_in_s=expires_in_s)
    return RescaleSteps(keys, request_id, revision, int(launch[0][1]) if launch else 0)


async def follow(etcd: Etcd, steps: RescaleSteps, until: Callable[[RescaleSteps], bool]) -> None:
    """Apply etcd's changes to `steps`, in order, until `until(steps)` holds."""
    if until(steps):
        return
    async for event in etcd.watch_prefix(steps.keys.root, steps.revision + 1):
        steps.see(event)
        if until(steps):
            return
