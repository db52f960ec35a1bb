"""What the driver's autoscaler publishes under the job's `autoscaler` key: the
recommendation, the inputs it used, the last decision with its reason, and a
bounded history of the rescales it decided on and how each ended. The operator
copies it into `status.autoscaler` (its JSON is that field's, camelCase) and
posts an event per new history entry; the CLI shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lockgate.runtime.autoscaling.decision import Decision, ScalingPolicy

HISTORY_SIZE = 10
"""How many decided rescales the record keeps, newest last."""

Outcome = Literal["rescaled", "refused", "failed", "timed-out"]


@dataclass(frozen=True)
class Rescaling:
    """A rescale the autoscaler decided on, and how its request ended."""

    sequence: int
    """Counts up over the driver's run: the operator's event per entry keys on it."""
    at_ms: int
    action: str
    from_parallelism: int
    to_parallelism: int
    reason: str
    outcome: Outcome
    detail: str | None = None
    """The driver's reason when refused or failed, the pause when rescaled."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "atMs": self.at_ms,
            "action": self.action,
            "fromParallelism": self.from_parallelism,
            "toParallelism": self.to_parallelism,
            "reason": self.reason,
            "outcome": self.outcome,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Rescaling:
        return cls(
            raw["sequence"],
            raw["atMs"],
            raw["action"],
            raw["fromParallelism"],
            raw["toParallelism"],
            raw["reason"],
            raw["outcome"],
            raw.get("detail"),
        )


@dataclass(frozen=True)
class AutoscalerStatus:
    parallelism: int
    """The running launch's."""
    min_replicas: int
    max_replicas: int
    updated_ms: int
    last_decision: dict[str, Any]
    """When, what (scale-up, scale-down, hold, not-taken) and why."""
    recommendation: int | None = None
    inputs: dict[str, Any] | None = None
    """The window's measurements the recommendation was sized by."""
    history: tuple[Rescaling, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "parallelism": self.parallelism,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "updatedMs": self.updated_ms,
            "lastDecision": self.last_decision,
            "recommendation": self.recommendation,
            "inputs": self.inputs,
            "history": [entry.to_json() for entry in self.history],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AutoscalerStatus:
        return cls(
            raw["parallelism"],
            raw["minReplicas"],
            raw["maxReplicas"],
            raw["updatedMs"],
            raw["lastDecision"],
            raw.get("recommendation"),
            raw.get("inputs"),
            tuple(Rescaling.from_json(entry) for entry in raw.get("history") or ()),
        )

    @classmethod
    def of(
        cls,
        decision: Decision,
        policy: ScalingPolicy,
        running: int,
        at_ms: int,
        history: tuple[Rescaling, ...],
    ) -> AutoscalerStatus:
        """`running`: the parallelism the decision was taken at."""
        last = {"atMs": at_ms, "action": decision.action, "reason": decision.reason}
        inputs = None if decision.sizing is None else _inputs(decision, running)
        return cls(
            running,
            policy.min_parallelism,
            policy.max_parallelism,
            at_ms,
            last,
            decision.recommended,
            inputs,
            history,
        )


def _inputs(decision: Decision, running: int) -> dict[str, Any]:
    sizing = decision.sizing
    assert sizing is not None
    load = sizing.load
    return {
        "windowStartMs": round(load.start_s * 1000),
        "windowEndMs": round(load.end_s * 1000),
        "inputRate": round(sizing.input_rate, 3),
        "ratesOf": sizing.rates_of,
        "readRate": round(load.read_rate, 3),
        "backlog": load.backlog,
        "backlogGrowth": None if load.backlog_growth is None else round(load.backlog_growth, 3),
        "targetRate": round(sizing.target_rate, 3),
        "utilization": round(sizing.utilization, 4),
        "needed": dict(sizing.needed),
        "busyTimeAlone": sizing.busy_time_alone,
        "unknownBacklog": list(load.unknown_backlog),
        "chains": {
            chain.vertex: {
                "recordsPerSecond": round(chain.records_per_s, 3),
                "trueRate": None if chain.true_rate is None else round(chain.true_rate, 3),
                "busy": round(chain.busy, 4),
                "maxBusy": round(chain.max_busy, 4),
                # By its key groups' record counts (None: not counted): 1 / parallelism when even.
                "busiestShare": None
                if chain.key_group_records is None
                else round(chain.busiest_share(running), 4),
            }
            for chain in load.chains
        },
    }
