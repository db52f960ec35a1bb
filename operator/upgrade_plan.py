"""The plan of a change the operator carries out — checkpoint-stop-modify-restore
— as one frozen record, kept in `status.upgrade` (`status.py`) before each step so that an
operator restarted mid-way resumes at the recorded step.

Steps: savepoint → stopping → starting, or stopping → suspended for a
suspension. `launch` is fixed when the plan is made: the next driver's number,
so there are never two drivers of one launch.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, Literal

from lockgate.operator.conditions import STORED
from pydantic import Field
from pydantic.dataclasses import dataclass

Restore = Literal["savepoint", "latest", "empty"]


class Step(enum.StrEnum):
    SAVEPOINT = "savepoint"  # ask the running driver for a savepoint, with stop
    STOPPING = "stopping"  # remove the running driver
    STARTING = "starting"  # create the next driver
    SUSPENDED = "suspended"  # stay stopped


@dataclass(frozen=True, config=STORED)
class UpgradePlan:
    """The step of a change in progress, recorded before it is taken."""

    step: Step
    reason: str
    """What the change is, in metrics and events: created, upgrade, resume, driver-lost, ..."""
    launch: int
    restore: Restore = "latest"
    """What the next driver starts from; a savepoint step sets it."""
    savepoint: str | None = None
    """With restore savepoint."""
    request: str | None = None
    """The savepoint request's id, with the savepoint step."""
    suspend: bool = False
    """Stop and stay stopped."""
    generation: int | None = None
    """The spec generation the plan carries out."""
    imported: Annotated[bool, Field(alias="import")] = False
    """The savepoint is spec.job.importUnsignedSavepoint, vouched for."""
    started_at: float | None = None
    """When it began, across resumes: durations count the whole change."""

    def at(self, step: Step, **changes: Any) -> UpgradePlan:
        """This plan, at `step` (with `changes`)."""
        return dataclasses.replace(self, step=step, **changes)
