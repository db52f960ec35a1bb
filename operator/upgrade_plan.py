"""The plan of a change the operator carries out — checkpoint-stop-modify-restore
— as one frozen record, kept in `status.upgrade` before each step so that an
operator restarted mid-way resumes at the recorded step.

Steps: savepoint → stopping → starting, or stopping → suspended for a
suspension. `launch` is fixed when the plan is made: the next driver's number,
so there are never two drivers of one launch.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

Restore = Literal["savepoint", "latest", "empty"]


class Step(enum.StrEnum):
    SAVEPOINT = "savepoint"  # ask the running driver for a savepoint, with stop
    STOPPING = "stopping"  # remove the running driver
    STARTING = "starting"  # create the next driver
    SUSPENDED = "suspended"  # stay stopped


@dataclass(frozen=True)
class UpgradePlan:
    step: Step
    reason: str  # what the change is, in metrics and events: created, upgrade, resume, driver-lost, ...
    launch: int
    restore: Restore = "latest"  # what the next driver starts from; a savepoint step sets it
    savepoint: str | None = None  # with restore "savepoint"
    request: str | None = None  # the savepoint request's id, with the savepoint step
    suspend: bool = False  # stop and stay stopped
    generation: int | None = None  # the spec generation the plan carries out
    imported: bool = False  # the savepoint is spec.job.importUnsignedSavepoint, vouched for
    started_at: float | None = None  # when it began, across resumes: durations count the whole change

    def at(self, step: Step, **changes: Any) -> UpgradePlan:
        """This plan, at `step` (with `changes`)."""
        return dataclasses.replace(self, step=step, **changes)

    def for_status(self) -> dict[str, Any]:
        """The fields by name (`imported` and `started_at` under status's names), those unset left out."""
        stored = {**dataclasses.asdict(self), "step": self.step.value}
        renamed = {"imported": "import", "started_at": "startedAt"}
        return {renamed.get(name, name): value for name, value in stored.items() if value is not None}

    @staticmethod
    def from_status(stored: Mapping[str, Any]) -> UpgradePlan:
        """What `for_status` wrote, or an earlier operator: it left out what it did not know."""
        restore = stored.get("restore") or "latest"
        if restore not in ("savepoint", "latest", "empty"):
            raise ValueError(f"status.upgrade.restore {restore!r} is not savepoint, latest or empty")
        generation, started = stored.get("generation"), stored.get("startedAt")
        return UpgradePlan(
            step=Step(stored["step"]),
            reason=str(stored.get("reason", "upgrade")),
            launch=int(stored["launch"]),
            restore=cast(Restore, restore),
            savepoint=stored.get("savepoint"),
            request=stored.get("request"),
            suspend=bool(stored.get("suspend", False)),
            generation=None if generation is None else int(generation),
            imported=bool(stored.get("import", False)),
            started_at=None if started is None else float(started),
        )
