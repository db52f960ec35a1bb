"""One StreamingJob run through the operator's logic itself — no kopf operator —
against a real etcd and an in-memory Kubernetes API (`FakeKube`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kopf
from lockgate.operator import reconcile
from lockgate.operator.job import Job, OperatorContext
from lockgate.operator.naming import API_VERSION, KIND
from lockgate.runtime.coordination.keys import JobKeys

from tests.operator.cluster_helpers import NAMESPACE, SPEC
from tests.operator.fake_kube import FakeKube


@dataclass
class RecordedEvents:
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)

    def warn(self, reason: str, message: str) -> None:
        self.events.append(("Warning", reason, message))

    def inform(self, reason: str, message: str) -> None:
        self.events.append(("Normal", reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]


@dataclass
class JobUnderTest:
    """One job: the API it lives in, the operator's context, the Events it got."""

    kube: FakeKube
    context: OperatorContext
    events: RecordedEvents
    name: str

    @property
    def keys(self) -> JobKeys:
        return JobKeys(NAMESPACE, self.name)

    async def job(self, spec: dict[str, Any] = SPEC, generation: int = 1) -> Job:
        """The job as a handler gets it: its spec of `generation`, its status now."""
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"namespace": NAMESPACE, "name": self.name, "uid": "u-1", "generation": generation},
            "spec": spec,
        }
        job = Job(kopf.Body(body), self.context, self.events)
        await job.refresh_status()
        return job

    async def accepted(self, spec: dict[str, Any] = SPEC, generation: int = 1) -> Job:
        """The job of `generation` once the operator checked and accepted its spec (as
        it does before it carries out a change of it)."""
        job = await self.job(spec, generation)
        await reconcile.checked_spec(job)
        return job

    def status(self) -> dict[str, Any]:
        return self.kube.statuses.get((NAMESPACE, self.name), {})

    def pod(self, launch: int) -> dict[str, Any] | None:
        return self.kube.objects.get(("Pod", NAMESPACE, f"{self.name}-driver-{launch}"))

    def recorded_steps(self) -> list[str]:
        """The steps written to `status.upgrade`, in order, repeats left out."""
        steps = [p["upgrade"]["step"] for p in self.kube.status_patches if p.get("upgrade")]
        return [step for i, step in enumerate(steps) if i == 0 or steps[i - 1] != step]

    async def running(self, spec: dict[str, Any] = SPEC) -> None:
        """The job, its first driver running (started as a new job is)."""
        await reconcile.on_create(await self.job(spec))
        await self.kube.set_pod_phase(f"{self.name}-driver-1", "Running")
        self.kube.status_patches.clear()
        self.events.events.clear()
