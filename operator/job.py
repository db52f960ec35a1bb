"""One StreamingJob as the operator's handlers see it, and what they share.

Events reach Kubernetes through `Events`, which the handler layer provides
(`handlers.py` posts them with kopf): kopf posts an event only from inside a
running operator, and the logic must also run without one — in unit tests,
which record the events they expect instead. Owner references stay here:
`kopf.adopt` only writes into the object it is given."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf
from lockgate.operator.driver_pod import Cluster
from lockgate.operator.job_etcd import JobEtcd
from lockgate.operator.job_policy import JobPolicy
from lockgate.operator.kube import Kube
from lockgate.operator.metrics import OperatorMetrics
from lockgate.operator.naming import JobNames
from lockgate.operator.phase import JobPhase
from lockgate.operator.spec import SpecError, StreamingJobSpec, parse_spec
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.restart import RestartStrategy, restart_strategy

LOST_DRIVER_BACKOFF = dataclasses.replace(
    restart_strategy("exponential-backoff", delay_s=1, max_delay_s=300), reset_after_s=600
)
"""How the operator relaunches a driver that was lost (its pod deleted or evicted,
its node gone, its process killed before it said why): at once, as a stream is
expected to be back within seconds (1 s), then backing off as a kubelet does for a
crashing container (doubling to 5 min, starting over after 10 min without a
loss), and never giving up. The job's restart strategy is its driver's: the
job master applies it to every failure of the job's tasks."""


@dataclass(frozen=True)
class OperatorContext:
    """What every handler needs: Kubernetes, etcd, the cluster's defaults, and what jobs may ask for."""

    kube: Kube
    etcd: JobEtcd
    cluster: Cluster
    policy: JobPolicy = field(default_factory=JobPolicy)
    driver_exit_timeout_s: float = 120.0
    namespace_recheck_s: float = 30.0  # a job refused for its namespace is checked again this often
    lost_driver_backoff: RestartStrategy = LOST_DRIVER_BACKOFF
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    _locks: dict[JobNames, asyncio.Lock] = field(default_factory=dict, init=False, repr=False)

    def lock(self, names: JobNames) -> asyncio.Lock:
        """Serializes the handlers of one job in this operator."""
        return self._locks.setdefault(names, asyncio.Lock())


class Events(Protocol):
    """The Events of one job (what `kubectl describe sj` shows)."""

    def warn(self, reason: str, message: str) -> None:
        """A Warning Event."""

    def inform(self, reason: str, message: str) -> None:
        """A Normal Event."""


@dataclass
class Job:
    body: kopf.Body  # the owner of what the job creates
    context: OperatorContext
    events: Events
    status: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = {k: v for k, v in dict(self.body.get("status") or {}).items() if k != "kopf"}

    @property
    def names(self) -> JobNames:
        metadata = self.body["metadata"]
        return JobNames(metadata["namespace"], metadata["name"])

    @property
    def keys(self) -> JobKeys:
        return JobKeys(self.names.namespace, self.names.name)

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 1))

    @property
    def raw_spec(self) -> dict[str, Any]:
        return dict(self.body.get("spec") or {})

    async def refresh_status(self) -> None:
        """Read the status as it is now (kopf's body may predate our last writes)."""
        status = await self.context.kube.job_status(self.names.namespace, self.names.name)
        if status is not None:
            self.status = {k: v for k, v in status.items() if k != "kopf"}

    @functools.cached_property
    def spec(self) -> StreamingJobSpec:
        """The parsed spec; raises SpecError naming the field (each time it is read)."""
        return parse_spec(self.raw_spec)

    @property
    def applied_raw_spec(self) -> dict[str, Any]:
        """The spec carried out: the job's own once the operator checked and accepted
        this generation; until then, or while it is refused (Degraded: unparseable,
        or against the operator's policy), the last one accepted — a lost driver is
        restarted by it, a resumed step launches it, savepoints go on by it."""
        if self.refused is None and self.accepted_generation() == self.generation:
            return self.raw_spec
        for name in ("acceptedSpec", "reconciledSpec"):  # the second: kept by earlier operators
            kept = self.status.get(name)
            if isinstance(kept, str):
                try:
                    return dict(json.loads(kept))
                except (ValueError, TypeError):
                    continue  # written by no operator: the next one
        raise SpecError(
            f"generation {self.generation} is not accepted yet, and no spec was accepted before"
            + (f": {self.refused}" if self.refused else "")
        )

    def accepted_generation(self) -> int | None:
        """The generation the operator last accepted; for a status an earlier operator
        wrote, the one it observed, unless it refused it."""
        accepted = self.status.get("acceptedGeneration", self.status.get("observedGeneration"))
        return accepted if isinstance(accepted, int) else None

    @property
    def refused(self) -> str | None:
        """Why the job's spec is refused (its Degraded condition), or None."""
        conditions = self.status.get("conditions") or []
        condition: dict[str, Any] = next((c for c in conditions if c.get("type") == "Degraded"), {})
        return str(condition.get("message") or "refused") if condition.get("status") == "True" else None

    @property
    def applied_spec(self) -> StreamingJobSpec:
        """`applied_raw_spec`, parsed; raises SpecError when no spec was ever good."""
        return parse_spec(self.applied_raw_spec)

    @property
    def phase(self) -> JobPhase | None:
        """The recorded phase; None before a handler recorded one."""
        recorded = self.status.get("phase")
        return None if recorded is None else JobPhase(recorded)

    @property
    def next_launch(self) -> int:
        return int(self.status.get("launch", 0)) + 1

    def adopt(self, obj: dict[str, Any]) -> None:
        """Make the job the owner of `obj`: it goes with the job."""
        kopf.adopt(obj, owner=self.body)

    def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the job."""
        self.events.warn(reason, message)

    def inform(self, reason: str, message: str) -> None:
        """A Normal Event on the job."""
        self.events.inform(reason, message)

    async def record(self, phase: JobPhase | None = None, **fields: Any) -> None:
        """Write `phase` (unless None) and `fields` into the job's status at once (a
        field None is removed); fields that already hold those values are not written
        again."""
        if phase is not None:
            self.context.metrics.job_phase(self.names.qualified, phase)
            fields["phase"] = phase.value
        changed = {name: value for name, value in fields.items() if self.status.get(name) != value}
        if not changed:
            return
        for name, value in changed.items():
            if value is None:
                self.status.pop(name, None)
            else:
                self.status[name] = value
        await self.context.kube.patch_status(self.names.namespace, self.names.name, changed)
