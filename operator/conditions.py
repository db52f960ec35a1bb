"""Standard Kubernetes conditions (Ready, Progressing, Degraded) in a status."""

from __future__ import annotations

import datetime
import time
from typing import Annotated, Any, Literal

from lockgate.runtime.failure_class import FailureClass
from pydantic import ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.dataclasses import dataclass

MESSAGE_LIMIT = 1000  # an Event's message, and a condition's, on one screen

STORED = ConfigDict(alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True)
"""How the operator's records are kept in status: camelCase names, read back by them."""

Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""An RFC 3339 time (`iso_time`'s)."""


@dataclass(frozen=True, config=STORED)
class Condition:
    """One of the job's Kubernetes conditions (Ready, Progressing, Degraded)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: Timestamp
    observed_generation: int | None = None


Conditions = tuple[Condition, ...]


def iso_time(epoch_s: float) -> str:
    """Kubernetes' timestamp format (RFC 3339, UTC, seconds)."""
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(timestamp: Any) -> float | None:
    """An RFC 3339 time in status (`iso_time`'s, or with fractions or an offset, as
    the CRD's date-time format takes them) in seconds; None for anything else."""
    if not isinstance(timestamp, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def set_condition(
    conditions: Conditions,
    kind: str,
    *,
    true: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> Conditions:
    """`conditions` with `kind` set; its transition time moves only when its status does."""
    status: Literal["True", "False"] = "True" if true else "False"
    previous = condition_of(conditions, kind)
    unchanged = previous is not None and previous.status == status
    since = previous.last_transition_time if previous is not None and unchanged else iso_time(time.time())
    condition = Condition(kind, status, reason, message, since, generation)
    return (*(c for c in conditions if c.type != kind), condition)


def condition_of(conditions: Conditions, kind: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


# What `Ready` and `Progressing` say through a job's life. Ready: the current
# launch runs the spec of the job's generation at its parallelism, with a
# heartbeat. Progressing: a change is being carried out (True), or it is done,
# or was refused (False, with the reason).


def changing(conditions: Conditions, phase: str, message: str, generation: int) -> Conditions:
    """A change (a start, an upgrade, a restart, a suspension) is being carried out."""
    conditions = set_condition(conditions, "Ready", true=False, reason=phase, message=message)
    return set_condition(
        conditions, "Progressing", true=True, reason=phase, message=message, generation=generation
    )


def runs(conditions: Conditions, *, running: int, desired: int, generation: int) -> Conditions:
    """The current driver says it runs, at parallelism `running`."""
    if running != desired:
        message = f"the driver runs at parallelism {running}, not the spec's {desired}"
        return set_condition(conditions, "Ready", true=False, reason="ParallelismDiffers", message=message)
    message = f"generation {generation} runs at parallelism {running}"
    conditions = set_condition(
        conditions, "Ready", true=True, reason="Running", message=message, generation=generation
    )
    return set_condition(
        conditions, "Progressing", true=False, reason="Running", message=message, generation=generation
    )


def stopped(conditions: Conditions, reason: str, message: str) -> Conditions:
    """No driver runs, and none is on its way: suspended, finished or failed."""
    conditions = set_condition(conditions, "Ready", true=False, reason=reason, message=message)
    return set_condition(conditions, "Progressing", true=False, reason=reason, message=message)


def refused(conditions: Conditions, message: str, generation: int, reason: str = "InvalidSpec") -> Conditions:
    """A spec was refused (`reason`: InvalidSpec, NamespaceNotRestricted): Degraded says
    why, and nothing is being carried out for it."""
    conditions = set_condition(conditions, "Degraded", true=True, reason=reason, message=message)
    return set_condition(
        conditions, "Progressing", true=False, reason="SpecRefused", message=message, generation=generation
    )


def failed_reason(failure_class: FailureClass) -> str:
    """The reason a Failed job's conditions give: the class of its failure
    (`CodeFailure`, `DefinitionFailure`, `RestoreFailure`, `TrustFailure`), or
    `RestartsExhausted` when its restart strategy gave up on a transient one."""
    if failure_class is FailureClass.TRANSIENT:
        return "RestartsExhausted"
    return f"{failure_class.value.capitalize()}Failure"
