"""Standard Kubernetes conditions (Ready, Progressing, Degraded) in a status."""

from __future__ import annotations

import datetime
import time
from typing import Any

from lockgate.runtime.failure_class import FailureClass

MESSAGE_LIMIT = 1000  # an Event's message, and a condition's, on one screen


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
    conditions: list[dict[str, Any]] | None,
    kind: str,
    *,
    true: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """`conditions` with `kind` set; its transition time moves only when its status does."""
    status = "True" if true else "False"
    previous = next((c for c in conditions or [] if c.get("type") == kind), {})
    changed = previous.get("status") != status  # or new
    condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": iso_time(time.time()) if changed else previous["lastTransitionTime"],
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return [c for c in conditions or [] if c.get("type") != kind] + [condition]


# What `Ready` and `Progressing` say through a job's life. Ready: the current
# launch runs the spec of the job's generation at its parallelism, with a
# heartbeat. Progressing: a change is being carried out (True), or it is done,
# or was refused (False, with the reason).
Conditions = list[dict[str, Any]]


def changing(conditions: Conditions | None, phase: str, message: str, generation: int) -> Conditions:
    """A change (a start, an upgrade, a restart, a suspension) is being carried out."""
    conditions = set_condition(conditions, "Ready", true=False, reason=phase, message=message)
    return set_condition(
        conditions, "Progressing", true=True, reason=phase, message=message, generation=generation
    )


def runs(conditions: Conditions | None, *, running: int, desired: int, generation: int) -> Conditions:
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


def stopped(conditions: Conditions | None, reason: str, message: str) -> Conditions:
    """No driver runs, and none is on its way: suspended, finished or failed."""
    conditions = set_condition(conditions, "Ready", true=False, reason=reason, message=message)
    return set_condition(conditions, "Progressing", true=False, reason=reason, message=message)


def refused(
    conditions: Conditions | None, message: str, generation: int, reason: str = "InvalidSpec"
) -> Conditions:
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
