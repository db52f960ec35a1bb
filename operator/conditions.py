"""Standard Kubernetes conditions (Ready, Progressing, Degraded) in a status."""

from __future__ import annotations

import datetime
from typing import Any


def iso_time(epoch_s: float) -> str:
    """Kubernetes' timestamp format (RFC 3339, UTC, seconds)."""
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso() -> str:
    return iso_time(datetime.datetime.now(datetime.UTC).timestamp())


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
    previous = next((c for c in conditions or [] if c.get("type") == kind), None)
    changed = previous is None or previous.get("status") != status
    condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_iso() if changed or previous is None else previous["lastTransitionTime"],
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return [c for c in conditions or [] if c.get("type") != kind] + [condition]
