"""Each step of an upgrade plan, carried out by the operator's logic itself — no
kopf operator — against a real etcd and an in-memory Kubernetes API: what it
records in status, when, and what an operator that finds a recorded step does."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lockgate.operator import reconcile
from lockgate.operator.status import StreamingJobStatus
from lockgate.operator.transition import carry_out, recorded_plan, restart_plan, start_plan, upgrade_plan
from lockgate.operator.upgrade_plan import Step
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import SavepointResult, encode

from tests.operator.cluster_helpers import NAMESPACE, SPEC, StandInDriver, driver_args
from tests.operator.job_under_test import JobUnderTest


def _restores(pod: dict[str, Any] | None) -> str:
    """What a driver pod restores: a savepoint's path, `latest` or `empty`."""
    assert pod is not None
    args = driver_args(pod)
    if "--from-savepoint" in args:
        return args[args.index("--from-savepoint") + 1]
    return "empty" if "--fresh" in args else "latest"


async def test_a_new_job_starts_its_first_driver(under_test: JobUnderTest) -> None:
    job = await under_test.accepted()
    await carry_out(job, start_plan(job, "created"))
    assert under_test.recorded_steps() == ["starting"]
    status = under_test.status()
    assert (status["phase"], status["launch"], status["maxParallelism"]) == ("Deploying", 1, 64)
    assert "upgrade" not in status
    assert _restores(under_test.pod(1)) == "latest"
    kinds = {kind for kind, _, _ in under_test.kube.objects}
    assert {"ConfigMap", "Service", "Secret", "ServiceAccount", "Role", "RoleBinding"} <= kinds


async def test_a_savepoint_taken_carries_the_state_to_the_next_driver(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running()
    changed = {**SPEC, "replicas": 4}
    driver = StandInDriver(under_test.kube, etcd, under_test.keys)
    async with driver.running():
        job = await under_test.accepted(changed, generation=2)
        await carry_out(job, upgrade_plan(job, job.spec, "upgrade"))
    ((request_id, request),) = driver.requests
    assert (request_id, request.stop) == ("upgrade-g2-l2", True)
    path = f"file:///savepoints/savepoint-{request_id}"
    assert under_test.recorded_steps() == ["savepoint", "stopping", "starting"]
    stopping = next(
        p["upgrade"] for p in under_test.kube.status_patches if p.get("upgrade", {}).get("savepoint")
    )
    assert (stopping["step"], stopping["restore"]) == ("stopping", "savepoint"), "recorded before the stop"
    assert under_test.pod(1) is None, "never two drivers"
    assert _restores(under_test.pod(2)) == path
    status = under_test.status()
    assert (status["launch"], status["replicas"], status["lastSavepoint"]["path"]) == (2, 0, path), (
        "status.replicas counts what runs: nothing until the new driver says it does"
    )
    assert under_test.events.reasons() == [
        "TakingSavepoint",
        "Savepoint",
        "StoppingDriver",
        "LaunchingDriver",
    ]


async def test_a_savepoint_that_times_out_falls_back_to_the_latest_checkpoint(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running()
    changed = {**SPEC, "replicas": 3, "savepoints": {"timeout": "1s"}}
    async with StandInDriver(under_test.kube, etcd, under_test.keys, answer=False).running():
        job = await under_test.accepted(changed, generation=2)
        await carry_out(job, upgrade_plan(job, job.spec, "upgrade"))
    assert under_test.recorded_steps() == ["savepoint", "stopping", "starting"]
    assert _restores(under_test.pod(2)) == "latest"
    assert "no savepoint within 1 s" in under_test.status()["message"]
    assert under_test.events.reasons() == [
        "TakingSavepoint",
        "SavepointTimedOut",
        "StoppingDriver",
        "LaunchingDriver",
    ]
    assert await etcd.get_prefix(under_test.keys.savepoint_requests) == [], "the request is withdrawn"


async def test_a_failed_savepoint_falls_back_to_the_latest_checkpoint(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running()
    job = await under_test.accepted({**SPEC, "replicas": 3}, generation=2)
    plan = upgrade_plan(job, job.spec, "upgrade")
    assert plan.request is not None
    failed = SavepointResult("failed", error="disk full")
    await etcd.put(under_test.keys.savepoint_result(plan.request), encode(failed))
    await carry_out(job, plan)
    assert _restores(under_test.pod(2)) == "latest"
    assert "savepoint failed (disk full)" in under_test.status()["message"]
    assert under_test.events.reasons() == [
        "TakingSavepoint",
        "SavepointFailed",
        "StoppingDriver",
        "LaunchingDriver",
    ]


async def test_a_job_not_running_is_upgraded_from_its_latest_checkpoint(under_test: JobUnderTest) -> None:
    """No driver said it runs (no heartbeat): nothing could answer a savepoint request."""
    await under_test.running()
    job = await under_test.accepted({**SPEC, "replicas": 3}, generation=2)
    await carry_out(job, upgrade_plan(job, job.spec, "upgrade"))
    assert under_test.recorded_steps() == ["savepoint", "stopping", "starting"]
    assert _restores(under_test.pod(2)) == "latest"
    assert under_test.events.reasons() == [
        "TakingSavepoint",
        "SavepointSkipped",
        "StoppingDriver",
        "LaunchingDriver",
    ]


@pytest.mark.parametrize(("mode", "restores"), [("last-state", "latest"), ("stateless", "empty")])
async def test_other_upgrade_modes_begin_by_stopping(
    under_test: JobUnderTest, mode: str, restores: str
) -> None:
    await under_test.running()
    job = await under_test.accepted({**SPEC, "upgradeMode": mode, "replicas": 3}, generation=2)
    await carry_out(job, upgrade_plan(job, job.spec, "upgrade"))
    assert under_test.recorded_steps() == ["stopping", "starting"]
    assert under_test.pod(1) is None
    assert _restores(under_test.pod(2)) == restores
    assert under_test.status()["phase"] == "Deploying"


async def test_a_restart_replaces_the_driver_from_the_latest_checkpoint(under_test: JobUnderTest) -> None:
    await under_test.running()
    job = await under_test.accepted()
    await carry_out(job, restart_plan(job, "restart"))
    assert under_test.recorded_steps() == ["stopping", "starting"]
    assert (under_test.pod(1), _restores(under_test.pod(2))) == (None, "latest")
    assert under_test.status()["launch"] == 2


async def test_a_suspension_stops_with_a_savepoint_and_stays_stopped(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    await under_test.running()
    driver = StandInDriver(under_test.kube, etcd, under_test.keys)
    async with driver.running():
        job = await under_test.accepted({**SPEC, "state": "suspended"}, generation=2)
        await carry_out(job, upgrade_plan(job, job.spec, "suspend", suspend=True))
    ((request_id, _),) = driver.requests
    assert under_test.recorded_steps() == ["savepoint", "stopping", "suspended"]
    status = under_test.status()
    assert (status["phase"], status["launch"]) == ("Suspended", 1), "no launch until it is resumed"
    assert status["suspendedWith"] == f"file:///savepoints/savepoint-{request_id}"
    assert "upgrade" not in status
    assert (under_test.pod(1), under_test.pod(2)) == (None, None)


async def test_an_operator_resumes_the_step_an_earlier_one_recorded(under_test: JobUnderTest) -> None:
    """The record as operators wrote it before plans were typed records: the savepoint
    was taken and the old driver has exited; the step left is the stop."""
    await under_test.running()
    savepoint = "file:///savepoints/savepoint-upgrade-g2-l2"
    earlier = {
        "step": "stopping",
        "reason": "upgrade",
        "launch": 2,
        "restore": "savepoint",
        "savepoint": savepoint,
        "request": "upgrade-g2-l2",
        "suspend": False,
        "generation": 2,
        "startedAt": time.time() - 5,
    }
    await under_test.kube.patch_status(NAMESPACE, under_test.name, {"upgrade": earlier, "phase": "Upgrading"})
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Succeeded")
    job = await under_test.job({**SPEC, "replicas": 4}, generation=2)
    await reconcile.on_change(job, SPEC)
    assert under_test.pod(1) is None
    assert _restores(under_test.pod(2)) == savepoint
    assert under_test.pod(3) is None, "the change is carried out once"
    status = under_test.status()
    assert (status["launch"], status["replicas"], status["observedGeneration"]) == (2, 0, 2)
    assert "upgrade" not in status


async def test_a_savepoint_answered_while_no_operator_ran_is_taken(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """The driver stopped with its savepoint: its answer is in etcd, it no longer runs."""
    await under_test.running()
    job = await under_test.job({**SPEC, "replicas": 4}, generation=2)
    plan = upgrade_plan(job, job.spec, "upgrade")
    assert plan.request is not None
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(upgrade=plan).for_storage()
    )
    path = "file:///savepoints/savepoint-answered"
    await etcd.put(under_test.keys.savepoint_result(plan.request), encode(SavepointResult("completed", path)))
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Succeeded")
    await job.refresh_status()
    await reconcile.on_change(job, SPEC)
    assert _restores(under_test.pod(2)) == path
    assert under_test.status()["lastSavepoint"]["path"] == path
    # The savepoint step was told when the earlier operator began it.
    assert under_test.events.reasons() == ["Savepoint", "StoppingDriver", "LaunchingDriver"]


async def test_a_savepoint_recorded_before_the_operator_stopped_is_recorded_once(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """Stopped after recording the savepoint, before recording the step after it."""
    await under_test.running()
    job = await under_test.job({**SPEC, "replicas": 4}, generation=2)
    plan = upgrade_plan(job, job.spec, "upgrade")
    assert plan.request is not None
    path = "file:///savepoints/savepoint-recorded"
    entry = {"path": path, "time": "2026-01-01T00:00:00Z", "reason": "upgrade", "status": "completed"}
    await under_test.kube.patch_status(
        NAMESPACE,
        under_test.name,
        {**StreamingJobStatus(upgrade=plan).for_storage(), "lastSavepoint": entry, "savepoints": [entry]},
    )
    await etcd.put(under_test.keys.savepoint_result(plan.request), encode(SavepointResult("completed", path)))
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Succeeded")
    await job.refresh_status()
    await reconcile.on_change(job, SPEC)
    assert _restores(under_test.pod(2)) == path
    assert under_test.status()["savepoints"] == [entry]
    assert under_test.events.reasons() == ["StoppingDriver", "LaunchingDriver"], "the savepoint step was told"
    assert await etcd.get_prefix(under_test.keys.savepoint_requests) == [], "nothing asked again"


async def test_a_driver_created_before_the_operator_stopped_is_not_created_twice(
    under_test: JobUnderTest,
) -> None:
    """Stopped between creating the pod and recording it: the resumed start finds it."""
    await under_test.running()
    job = await under_test.accepted()
    plan = restart_plan(job, "restart")
    await carry_out(job, plan)
    created = under_test.pod(2)
    assert created is not None
    # As if the record of the start had not been written: the plan still at `starting`.
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(upgrade=plan.at(Step.STARTING), launch=1).for_storage()
    )
    resumed = await under_test.job()
    recorded = recorded_plan(resumed)
    assert recorded is not None
    await carry_out(resumed, recorded)
    assert under_test.pod(2) == created
    assert under_test.pod(3) is None
    assert under_test.status()["launch"] == 2
