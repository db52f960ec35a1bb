"""The driver's autoscaler as the StreamingJob shows it: its record in etcd copied
into status.autoscaler, an `Autoscaled` event per new rescale in its history
(once), and Ready while the job runs at a parallelism the autoscaler chose
rather than spec.replicas — run through the operator's observation on a real
etcd."""

from __future__ import annotations

from typing import Any

from lockgate.operator import reconcile
from lockgate.runtime.autoscaling.status import AutoscalerStatus, Rescaling
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import encode

from tests.operator.cluster_helpers import SPEC, StandInDriver
from tests.operator.job_under_test import JobUnderTest

AUTOSCALED = {**SPEC, "replicas": 2, "autoscaler": {"enabled": True, "minReplicas": 1, "maxReplicas": 8}}
UP = Rescaling(
    1, 1_800_000_000_000, "scale-up", 2, 4, "scale up 2 -> 4: input 900/s", "rescaled", "paused 1.2 s"
)
REFUSED = Rescaling(
    2, 1_800_000_060_000, "scale-up", 4, 8, "scale up 4 -> 8: input 2000/s", "refused", "no executors"
)


def _record(*history: Rescaling, parallelism: int = 4) -> AutoscalerStatus:
    last = {"atMs": 1_800_000_061_000, "action": "hold", "reason": "hold at 4: input 900/s"}
    inputs = {"inputRate": 900.0, "backlog": 10, "needed": {"sum": 4}}
    return AutoscalerStatus(parallelism, 1, 8, 1_800_000_061_000, last, 4, inputs, history)


async def _observe(under_test: JobUnderTest, spec: dict[str, Any]) -> None:
    await reconcile.observe(await under_test.job(spec))


async def test_the_autoscalers_record_is_the_status_and_each_new_rescale_an_event_once(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running(AUTOSCALED)
    async with StandInDriver(under_test.kube, etcd, under_test.keys, parallelism=4).running():
        await etcd.put(under_test.keys.autoscaler, encode(_record(UP)))
        await _observe(under_test, AUTOSCALED)
        await _observe(under_test, AUTOSCALED)
        assert under_test.status()["autoscaler"] == _record(UP).to_json()
        await etcd.put(under_test.keys.autoscaler, encode(_record(UP, REFUSED)))
        await _observe(under_test, AUTOSCALED)

    status = under_test.status()
    assert status["autoscaler"]["history"] == [UP.to_json(), REFUSED.to_json()]
    assert status["autoscaler"]["inputs"]["needed"] == {"sum": 4}
    autoscaled = [
        (kind, message) for kind, reason, message in under_test.events.events if reason == "Autoscaled"
    ]
    assert autoscaled == [
        ("Normal", "scale-up 2 -> 4: rescaled (paused 1.2 s); scale up 2 -> 4: input 900/s"),
        ("Warning", "scale-up 4 -> 8: refused (no executors); scale up 4 -> 8: input 2000/s"),
    ]
    assert status["replicas"] == 4, "kubectl get shows the parallelism it runs at"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Running"), "the autoscaler owns the parallelism"


async def test_without_the_autoscaler_a_parallelism_other_than_the_specs_is_not_ready_and_no_record_is_shown(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running(SPEC)
    async with StandInDriver(under_test.kube, etcd, under_test.keys, parallelism=4).running():
        await etcd.put(under_test.keys.autoscaler, encode(_record(UP)))  # of an earlier, autoscaled run
        await _observe(under_test, SPEC)
    status = under_test.status()
    assert "autoscaler" not in status
    assert "Autoscaled" not in under_test.events.reasons()
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ParallelismDiffers")
