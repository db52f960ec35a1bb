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
from lockgate.operator.status import StreamingJobStatus
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
    status: StreamingJobStatus = field(init=False)

    def __post_init__(self) -> None:
        self.status = StreamingJobStatus.from_storage(dict(self.body.get("status") or {}))

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
            self.status = StreamingJobStatus.from_storage(status)

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
        if self.refused is None and self.status.accepted_generation == self.generation:
            return self.raw_spec
        accepted = self.status.accepted_raw_spec
        if accepted is None:
            raise SpecError(
                f"generation {self.generation} is not accepted yet, and no spec was accepted before"
                + (f": {self.refused}" if self.refused else "")
            )
        return accepted

    @property
    def refused(self) -> str | None:
        """Why the job's spec is refused (its Degraded condition), or None."""
        return self.status.refused

    @property
    def applied_spec(self) -> StreamingJobSpec:
        """`applied_raw_spec`, parsed; raises SpecError when no spec was ever good."""
        return parse_spec(self.applied_raw_spec)

    @property
    def phase(self) -> JobPhase | None:
        """The recorded phase; None before a handler recorded one."""
        return self.status.phase

    @property
    def next_launch(self) -> int:
        return self.status.launch + 1

    def adopt(self, obj: dict[str, Any]) -> None:
        """Make the job the owner of `obj`: it goes with the job."""
        kopf.adopt(obj, owner=self.body)

    def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the job."""
        self.events.warn(reason, message)

    def inform(self, reason: str, message: str) -> None:
        """A Normal Event on the job."""
        self.events.inform(reason, message)

    async def record(self, **fields: Any) -> None:
        """Write `fields` (`StreamingJobStatus`'s, a field None unset) into the job's
        status at once; only what changes is written."""
        if fields.get("phase") is not None:
            self.context.metrics.job_phase(self.names.qualified, fields["phase"])
        changed = self.status.changed(**fields)
        patch = self.status.patch_to(changed)
        if not patch:
            return
        await self.context.kube.patch_status(self.names.namespace, self.names.name, patch)
        self.status = changed
