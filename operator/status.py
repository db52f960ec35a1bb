"""A StreamingJob's status as the operator keeps it: one typed, frozen record,
read from and written to the object's status by its fields' camelCase names
(`from_storage`, `for_storage`), as kopf keeps its handlers' progress records.

The CRD's status schema is this record's (`crd.py` derives it): the API server
refuses a status the record could not read, so `from_storage` reads what the
operator wrote. Fields left unset are absent from the stored status."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

from lockgate.operator.conditions import STORED, Conditions, Timestamp, condition_of
from lockgate.operator.phase import JobPhase
from lockgate.operator.savepoint_history import MAX_ENTRIES, SavepointEntry
from lockgate.operator.upgrade_plan import Restore, UpgradePlan
from lockgate.runtime.failure_class import FailureClass
from pydantic import Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass


class StatusUnreadableError(ValueError):
    """A status the record cannot read: written by someone other than the operator
    (the CRD's schema keeps out most of what it could not read)."""


@dataclass(frozen=True, config=STORED)
class Failure:
    """Why the job is Failed, as its driver recorded it: never relaunched until a new
    generation of the spec. Cleared by the next launch."""

    failure_class: Annotated[FailureClass, Field(alias="class")]
    """transient: the restart strategy gave up; code: the job's code does not import or build;
    definition: the job, its options or its spec; restore: the state it restores does not fit,
    is damaged or missing; trust: that state is not signed by the job's key."""
    message: str
    driver: str | None = None
    """The driver pod that recorded it."""
    traceback: str | None = None
    """The job's part of the traceback (its last 4000 characters)."""


@dataclass(frozen=True, config=STORED)
class CheckpointSummary:
    """The job's newest completed checkpoint."""

    id: int
    time: Timestamp
    bytes: int
    duration_ms: int


@dataclass(frozen=True, config=STORED)
class Deployment:
    """What the current launch started from."""

    launch: int
    restore: Restore
    savepoint: str | None = None


@dataclass(frozen=True, config=STORED)
class AutoscalerRescale:
    """A rescale the driver's autoscaler decided on, and how its request ended."""

    sequence: int
    at_ms: int
    action: str
    from_parallelism: int
    to_parallelism: int
    reason: str
    outcome: str
    """rescaled, refused, failed or timed-out."""
    detail: str | None = None


@dataclass(frozen=True, config=STORED)
class AutoscalerView:
    """The driver's autoscaler record as it publishes it (`lockgate.runtime.autoscaling.status`):
    the recommendation, the inputs it was sized by, the last decision and the last rescales."""

    parallelism: int
    min_replicas: int
    max_replicas: int
    updated_ms: int
    last_decision: dict[str, Any]
    recommendation: int | None = None
    inputs: dict[str, Any] | None = None
    history: tuple[AutoscalerRescale, ...] = ()


@dataclass(frozen=True, config=STORED)
class StreamingJobStatus:
    """What the operator knows of a job between two of its handlers."""

    phase: JobPhase | None = None
    message: str | None = None
    conditions: Conditions = ()
    observed_generation: int | None = None
    """The generation the current launch carries out."""
    accepted_spec: str | None = None
    """The last spec the operator checked and accepted (JSON). Until it accepts a new generation,
    or while it refuses one, the job goes on by this one: a lost driver is relaunched by it, and
    a change is compared with it."""
    accepted_generation: int | None = None
    """The generation of acceptedSpec."""
    launch: int = 0
    """The current driver's launch number (0: none launched yet)."""
    deployment: Deployment | None = None
    upgrade: UpgradePlan | None = None
    suspended_with: str | None = None
    """The savepoint a suspended job resumes from (latest: its latest checkpoint)."""
    max_parallelism: int | None = None
    """The key groups the job's state was first written with (fixed from then on)."""
    replicas: int | None = None
    """The parallelism the current driver says it runs at (0 while none runs)."""
    selector: str | None = None
    job_id: str | None = None
    restarts: int | None = None
    """Restarts of the job's tasks and relaunches of its driver."""
    failure: Failure | None = None
    last_checkpoint: CheckpointSummary | None = None
    last_savepoint: SavepointEntry | None = None
    """The newest completed savepoint."""
    savepoints: Annotated[tuple[SavepointEntry, ...], Field(json_schema_extra={"maxItems": MAX_ENTRIES})] = ()
    """The savepoints the operator asked for, newest first (spec.savepoints.historySize, historyMaxAge)."""
    # maxItems bounds what the API server takes; the operator trims what it writes to it (`savepoints.py`).
    next_periodic_savepoint: Timestamp | None = None
    driver_restarts: int = 0
    """Relaunches of a lost driver."""
    driver_failure_times: tuple[float, ...] = ()
    """When drivers were lost (seconds since the epoch): the relaunch backoff's history."""
    restart_at: float | None = None
    """When a lost driver is relaunched (seconds since the epoch)."""
    autoscaler: AutoscalerView | None = None
    """The driver's autoscaler record, while spec.autoscaler is enabled."""

    @staticmethod
    def from_storage(stored: dict[str, Any]) -> StreamingJobStatus:
        """The record in an object's `status`; raises StatusUnreadableError naming the
        field that is not what the operator writes."""
        try:
            return _STORAGE.validate_python(stored)
        except ValidationError as error:
            wrong = "; ".join(
                f"status.{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
            )
            raise StatusUnreadableError(
                f"the StreamingJob's status is not what the operator writes: {wrong}; correct or remove "
                "that field (kubectl patch --subresource=status)"
            ) from None

    def for_storage(self) -> dict[str, Any]:
        """The fields by their names in status, those at their defaults left out."""
        stored: dict[str, Any] = _STORAGE.dump_python(self, by_alias=True, mode="json", exclude_defaults=True)
        return stored

    def patch_to(self, changed: StreamingJobStatus) -> dict[str, Any]:
        """The merge patch that turns this status into `changed` (a field unset: None)."""
        before, after = self.for_storage(), changed.for_storage()
        return {
            name: after.get(name)
            for name in before.keys() | after.keys()
            if before.get(name) != after.get(name)
        }

    def changed(self, **fields: Any) -> StreamingJobStatus:
        return dataclasses.replace(self, **fields)

    @property
    def accepted_raw_spec(self) -> dict[str, Any] | None:
        return None if self.accepted_spec is None else dict(json.loads(self.accepted_spec))

    @property
    def refused(self) -> str | None:
        """Why the job's spec is refused (its Degraded condition), or None."""
        degraded = condition_of(self.conditions, "Degraded")
        return (degraded.message or "refused") if degraded is not None and degraded.status == "True" else None


_STORAGE = TypeAdapter(StreamingJobStatus)
AUTOSCALER_VIEW = TypeAdapter(AutoscalerView)


def status_schema() -> dict[str, Any]:
    """The record's JSON schema, by its names in status (`crd.py` makes it structural)."""
    schema: dict[str, Any] = _STORAGE.json_schema(by_alias=True, mode="serialization")
    return schema
