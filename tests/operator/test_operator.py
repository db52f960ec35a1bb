"""The operator end to end against the emulated API server and a real etcd."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock
import kubernetes_validate
import pytest
from kubernetes import client
from lockgate.operator.job_policy import JobPolicy
from lockgate.operator.naming import JobNames
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, encode

from tests.kube_emulator import RESTRICTED, add_namespace
from tests.operator.cluster_helpers import (
    JOBS,
    NAMESPACE,
    SPEC,
    Kubectl,
    StandInDriver,
    driver_args,
    undeclared_status_fields,
)
from tests.operator.conftest import Operator
from tests.operator.test_crd import KUBERNETES
from tests.polling import eventually

PODS, SERVICES, CONFIG_MAPS, SECRETS = "v1/pods", "v1/services", "v1/configmaps", "v1/secrets"
ACCOUNTS, ROLES, BINDINGS = (
    "v1/serviceaccounts",
    "rbac.authorization.k8s.io/v1/roles",
    "rbac.authorization.k8s.io/v1/rolebindings",
)


def _conf(pod: dict[str, Any], key: str) -> str:
    args = driver_args(pod)
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{key}="))


@pytest.fixture
def kubectl(cluster, operator: Operator) -> Kubectl:
    return Kubectl(cluster[0], operator.api())


async def _launched(kubectl: Kubectl, name: str, launch: int) -> dict[str, Any]:
    """Wait for driver `launch` to be created and recorded in status; its pod."""

    def done() -> bool:
        status = kubectl.status(name)
        return status.get("launch") == launch and "upgrade" not in status

    await eventually(done, f"launch {launch} is recorded in status")
    assert kubectl.exists(PODS, f"{name}-driver-{launch}")
    return kubectl.get(PODS, f"{name}-driver-{launch}")


async def _degraded(kubectl: Kubectl, name: str) -> None:
    """Wait for the job's Degraded condition: a spec the operator did not apply."""

    def degraded() -> bool:
        conditions = kubectl.status(name).get("conditions", [])
        return any(c["type"] == "Degraded" and c["status"] == "True" for c in conditions)

    await eventually(degraded, "the Degraded condition is set")


async def _created(kubectl: Kubectl, name: str) -> dict[str, Any]:
    await kubectl.apply(name, SPEC)
    return await _launched(kubectl, name, 1)


async def test_create_makes_the_owned_objects(kubectl: Kubectl, job_name: str) -> None:
    pod = await _created(kubectl, job_name)
    owned = [
        kubectl.get(SERVICES, f"{job_name}-driver"),
        kubectl.get(CONFIG_MAPS, f"{job_name}-lockgate-job"),
        kubectl.get(ACCOUNTS, f"{job_name}-lockgate"),
        kubectl.get(ROLES, f"{job_name}-lockgate-driver"),
        kubectl.get(BINDINGS, f"{job_name}-lockgate-driver"),
        pod,
    ]
    uid = kubectl.job(job_name)["metadata"]["uid"]
    for obj in owned:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("StreamingJob", job_name, uid)
        assert owner["controller"] is True
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    assert _conf(pod, "spark.executor.instances") == "2"
    assert _conf(pod, "spark.kubernetes.driver.pod.name") == f"{job_name}-driver-1"
    status = kubectl.status(job_name)
    assert status["phase"] == "Deploying"
    assert (status["replicas"], status["maxParallelism"], status["launch"]) == (0, 64, 1), "none runs yet"
    assert status["selector"] == f"lockgate.dev/job={job_name},app.kubernetes.io/component=executor"


async def test_running_driver_reported_in_status(kubectl: Kubectl, job_name: str, etcd: Etcd) -> None:
    await _created(kubectl, job_name)
    keys = JobKeys(NAMESPACE, job_name)
    # What a driver's coordinator writes when checkpoint 7 completes.
    completed = CompletedCheckpoint(7, "checkpoint", "file:///c/chk-7", {"sum": 2}, 64, 4096, 1_000, 1_250)
    await etcd.put(keys.completed_of(7), encode(completed))
    await etcd.put(keys.latest, b"7")
    async with StandInDriver(kubectl, etcd, keys).running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: kubectl.status(job_name).get("phase") == "Running", "the job is Running")
    status = kubectl.status(job_name)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert status["lastCheckpoint"] == {
        "id": 7,
        "time": "1970-01-01T00:00:01Z",
        "bytes": 4096,
        "durationMs": 250,
    }
    assert status["restarts"] == 0


async def test_scale_takes_a_savepoint_and_restarts_from_it(
    kubectl: Kubectl, job_name: str, etcd: Etcd, operator: Operator
) -> None:
    await _created(kubectl, job_name)
    key = kubectl.get(SECRETS, f"{job_name}-lockgate-snapshot-key")["data"]["key"]
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.patch_spec(job_name, {"replicas": 4})
        await _launched(kubectl, job_name, 2)
    assert not kubectl.exists(PODS, f"{job_name}-driver-1"), "never two drivers"
    secret = kubectl.get(SECRETS, f"{job_name}-lockgate-snapshot-key")
    assert secret["data"]["key"] == key, "the new launch checks the savepoint with the key that signed it"
    assert secret["metadata"]["ownerReferences"][0]["name"] == job_name, "it goes with the job"
    ((request_id, request),) = driver.requests
    assert request.stop
    pod = kubectl.get(PODS, f"{job_name}-driver-2")
    savepoint = f"file:///savepoints/savepoint-{request_id}"
    args = driver_args(pod)
    assert args[args.index("--from-savepoint") + 1] == savepoint
    assert args[args.index("--parallelism") + 1] == "4"
    assert _conf(pod, "spark.executor.instances") == "4"
    status = kubectl.status(job_name)
    assert (status["replicas"], status["launch"], status["maxParallelism"]) == (0, 2, 64), "none runs yet"
    assert status["lastSavepoint"]["path"] == savepoint
    assert "upgrade" not in status
    assert operator.context is not None
    metrics = operator.context.metrics.registry
    job = {"job_namespace": NAMESPACE, "job_id": job_name}
    upgrades = {**job, "reason": "upgrade"}
    assert metrics.get_sample_value("lockgate_operator_upgrade_duration_seconds_count", upgrades) == 1
    savepoints = {**job, "result": "completed"}
    assert metrics.get_sample_value("lockgate_operator_savepoint_duration_seconds_count", savepoints) == 1


def _ready(kubectl: Kubectl, name: str) -> bool:
    """What `kubectl wait --for=condition=Ready` waits for, at the job's current
    generation (the condition's observedGeneration: right after a change, the
    condition still describes the generation before it)."""
    job = kubectl.job(name)
    conditions = (job.get("status") or {}).get("conditions", [])
    ready = next((c for c in conditions if c["type"] == "Ready"), {})
    return ready.get("status") == "True" and ready.get("observedGeneration") == job["metadata"]["generation"]


def _condition(kubectl: Kubectl, name: str, kind: str) -> tuple[str, str]:
    found = next(c for c in kubectl.status(name)["conditions"] if c["type"] == kind)
    return found["status"], found["reason"]


async def test_a_scale_the_running_driver_carries_out_keeps_it_and_says_so(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    await _created(kubectl, job_name)
    keys = JobKeys(NAMESPACE, job_name)
    async with StandInDriver(kubectl, etcd, keys, rescales=True).running() as driver:
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: _ready(kubectl, job_name), "launch 1 is Ready")
        await kubectl.patch_spec(job_name, {"replicas": 4})
        await eventually(
            lambda: kubectl.status(job_name).get("observedGeneration") == 2, "generation 2 observed"
        )
        assert driver.parallelism == 4, "the running driver was asked"
        await eventually(lambda: _ready(kubectl, job_name), "Ready at the scaled generation")
        status = kubectl.status(job_name)
        assert (status["replicas"], status["launch"], status["phase"]) == (4, 1, "Running")
        assert not kubectl.exists(PODS, f"{job_name}-driver-2"), "no new driver"
        assert json.loads(status["acceptedSpec"])["replicas"] == 4, "the spec in force"
        assert _condition(kubectl, job_name, "Progressing") == ("False", "Running")
    reasons = ["LaunchingDriver", "Running", "SpecChanged", "RescalingInPlace", "RescaledInPlace"]
    assert kubectl.event_reasons(job_name) == reasons
    messages = {reason: message for _, reason, message in kubectl.events(job_name)}
    assert messages["RescaledInPlace"] == "parallelism 4: tasks restarted from checkpoint 1"


async def test_ready_after_a_scale_means_the_new_parallelism_runs(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    """A driver that refuses to rescale in place (here: a stand-in that cannot) is
    replaced. Failed before: Ready stayed True through the upgrade, and
    status.replicas jumped to the target when the new driver pod was created."""
    await _created(kubectl, job_name)
    keys = JobKeys(NAMESPACE, job_name)
    async with StandInDriver(kubectl, etcd, keys).running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: _ready(kubectl, job_name), "launch 1 is Ready")
        assert kubectl.status(job_name)["replicas"] == 2
        assert _condition(kubectl, job_name, "Progressing") == ("False", "Running")
        await kubectl.patch_spec(job_name, {"replicas": 4})  # what `kubectl scale --replicas=4` sets
        await eventually(lambda: _condition(kubectl, job_name, "Ready")[0] == "False", "Ready is False")
        assert _condition(kubectl, job_name, "Progressing") == ("True", "Upgrading")
        await _launched(kubectl, job_name, 2)
    assert not _ready(kubectl, job_name), "the new driver has not said it runs"
    assert kubectl.status(job_name)["replicas"] == 0
    assert _condition(kubectl, job_name, "Progressing") == ("True", "Deploying")

    async with StandInDriver(kubectl, etcd, keys, launch=2, parallelism=4).running():
        await kubectl.set_pod_phase(f"{job_name}-driver-2", "Running")
        await eventually(lambda: _ready(kubectl, job_name), "Ready at the scaled generation")
        status = kubectl.status(job_name)
        assert (status["replicas"], status["phase"]) == (4, "Running")
        assert _condition(kubectl, job_name, "Progressing") == ("False", "Running")
    # What `kubectl describe sj` lists under Events: every step of the scale.
    scale = [
        "LaunchingDriver",
        "Running",
        "SpecChanged",
        "RescalingInPlace",
        "InPlaceRescaleFallback",
        "TakingSavepoint",
        "Savepoint",
        "StoppingDriver",
        "LaunchingDriver",
        "Running",
    ]
    await eventually(lambda: kubectl.event_reasons(job_name) == scale, f"the Events {scale}")
    messages = {reason: message for _, reason, message in kubectl.events(job_name)[2:]}
    assert messages["SpecChanged"] == "generation 2 changes replicas"
    assert messages["InPlaceRescaleFallback"] == (
        "parallelism 4 not reached in place (the driver refused it: this stand-in does not rescale); "
        "carrying it out by savepoint, stop and restart"
    )
    assert undeclared_status_fields(kubectl.status(job_name)) == [], "a cluster would keep all of it"
    assert messages["Running"] == "launch 2 runs at parallelism 4"


async def test_a_savepoint_that_times_out_falls_back_to_the_latest_checkpoint(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    await _created(kubectl, job_name)
    keys = JobKeys(NAMESPACE, job_name)
    async with StandInDriver(kubectl, etcd, keys, answer=False).running():
        await kubectl.patch_spec(job_name, {"replicas": 3, "savepoints": {"timeout": "1s"}})
        await _launched(kubectl, job_name, 2)
    args = driver_args(kubectl.get(PODS, f"{job_name}-driver-2"))
    assert "--from-savepoint" not in args, "restores the latest checkpoint (the driver's default)"
    assert "--fresh" not in args
    assert "no savepoint within 1 s" in kubectl.status(job_name)["message"]
    assert await etcd.get_prefix(keys.savepoint_requests) == [], "the unanswered request is withdrawn"


def _bookkeeping(kubectl: Kubectl, name: str) -> tuple[list[str], set[str]]:
    metadata = kubectl.job(name)["metadata"]
    return list(metadata.get("finalizers") or []), set(metadata.get("annotations") or {})


async def test_kopfs_bookkeeping_is_under_lockgate_dev(kubectl: Kubectl, job_name: str) -> None:
    """Its finalizer and handled spec under the operator's own domain, not kopf's default."""
    await _created(kubectl, job_name)
    await eventually(
        lambda: _bookkeeping(kubectl, job_name)[1] >= {"lockgate.dev/last-handled-configuration"},
        "the handled spec is stored",
    )
    finalizers, annotations = _bookkeeping(kubectl, job_name)
    assert finalizers == ["lockgate.dev/finalizer"]
    assert not [a for a in annotations if a.startswith("kopf.zalando.org/")], annotations
    await kubectl.delete(job_name)
    await eventually(lambda: not kubectl.exists(JOBS, job_name), "the deleted job is gone")


async def test_a_job_deleted_while_its_observer_runs_is_gone_within_seconds(
    kubectl: Kubectl, job_name: str, operator: Operator
) -> None:
    """kopf keeps the finalizer until the job's timer has exited, and by default looks
    again only a minute later: a deletion that met a running observation took 60 s."""
    await _created(kubectl, job_name)
    assert operator.context is not None
    lock = operator.context.lock(JobNames(NAMESPACE, job_name))
    async with lock:  # the next observation starts and waits inside its handler
        await eventually(lambda: bool(lock._waiters), "an observation waits for the job")
        await kubectl.delete(job_name)
        deleted = time.monotonic()
    await eventually(lambda: not kubectl.exists(JOBS, job_name), "the deleted job is gone", timeout_s=30)
    assert time.monotonic() - deleted < 5


async def test_an_operator_restarted_mid_upgrade_resumes_it(
    kubectl: Kubectl, job_name: str, etcd: Etcd, operator: Operator
) -> None:
    await _created(kubectl, job_name)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name), answer=False)
    async with driver.running():
        await kubectl.patch_spec(job_name, {"replicas": 4})
        await eventually(lambda: bool(driver.requests), "the savepoint is requested")
        assert kubectl.status(job_name)["upgrade"]["step"] == "savepoint"
        await operator.stop()
        ((request_id, request),) = driver.requests
        savepoint = await driver.complete(request_id, request)  # the driver finishes while no operator runs
        await operator.start()
        await _launched(kubectl, job_name, 2)
    assert len(driver.requests) == 1, "the resumed upgrade reuses the recorded request"
    args = driver_args(kubectl.get(PODS, f"{job_name}-driver-2"))
    assert args[args.index("--from-savepoint") + 1] == savepoint
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    assert not kubectl.exists(PODS, f"{job_name}-driver-3"), "the change is carried out once"


async def test_suspend_and_resume_go_through_a_savepoint(kubectl: Kubectl, job_name: str, etcd: Etcd) -> None:
    await _created(kubectl, job_name)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.patch_spec(job_name, {"state": "suspended"})
        await eventually(lambda: kubectl.status(job_name).get("phase") == "Suspended", "the job is suspended")
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    ((request_id, _),) = driver.requests
    await kubectl.patch_spec(job_name, {"state": "running"})
    await _launched(kubectl, job_name, 2)
    args = driver_args(kubectl.get(PODS, f"{job_name}-driver-2"))
    assert args[args.index("--from-savepoint") + 1] == f"file:///savepoints/savepoint-{request_id}"


async def test_a_trigger_nonce_takes_a_savepoint_without_a_restart(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    await _created(kubectl, job_name)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.patch_spec(job_name, {"savepoints": {"triggerNonce": 7}})
        await eventually(lambda: bool(kubectl.status(job_name).get("savepoints")), "a savepoint in history")
    ((request_id, request),) = driver.requests
    assert (request_id, request.stop) == ("nonce-7", False)
    (entry,) = kubectl.status(job_name)["savepoints"]
    assert entry["reason"] == "trigger nonce 7"
    assert not kubectl.exists(PODS, f"{job_name}-driver-2"), "no restart"


async def test_an_invalid_change_keeps_the_last_good_spec_running(kubectl: Kubectl, job_name: str) -> None:
    await _created(kubectl, job_name)
    await kubectl.patch_spec(job_name, {"replicas": 100})  # above maxParallelism 64

    await _degraded(kubectl, job_name)
    condition = next(c for c in kubectl.status(job_name)["conditions"] if c["type"] == "Degraded")
    assert "spec.replicas 100 exceeds" in condition["message"]
    await eventually(lambda: "InvalidSpec" in kubectl.event_reasons(job_name), "a warning event is posted")
    (event,) = [event for event in kubectl.events(job_name) if event[1] == "InvalidSpec"]
    assert event[0] == "Warning"
    assert "spec.replicas 100 exceeds" in event[2]
    assert kubectl.exists(PODS, f"{job_name}-driver-1")
    assert not kubectl.exists(PODS, f"{job_name}-driver-2")


async def _running_then_refused(kubectl: Kubectl, job_name: str) -> None:
    """Launch 1 runs, and a change of the spec is refused: a memory that is no
    quantity passes the CRD's int-or-string, the operator's model refuses it."""
    await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
    await eventually(lambda: _ready(kubectl, job_name), "launch 1 is Ready")
    await kubectl.patch_spec(job_name, {"executor": {"resources": {"requests": {"memory": "lots"}}}})
    await _degraded(kubectl, job_name)


async def test_a_running_job_with_a_refused_spec_is_still_observed(
    kubectl: Kubectl, job_name: str, etcd: Etcd, operator: Operator
) -> None:
    """A spec the model refuses (a memory that is no quantity passes the CRD's
    int-or-string) failed every observation of the job's driver."""
    await _created(kubectl, job_name)
    async with StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name)).running():
        await _running_then_refused(kubectl, job_name)
        assert operator.context is not None
        observed = operator.context.metrics.registry.get_sample_value
        ok = {"handler": "observe", "result": "ok"}
        after = observed("lockgate_operator_reconciles_total", ok) or 0
        await eventually(
            lambda: (observed("lockgate_operator_reconciles_total", ok) or 0) > after + 1,
            "the driver is observed beside the refused spec",
        )
    assert observed("lockgate_operator_reconciles_total", {"handler": "observe", "result": "error"}) is None
    assert kubectl.status(job_name)["replicas"] == 2


async def test_a_job_asking_for_the_node_is_refused_before_anything_is_created(
    kubectl: Kubectl, job_name: str
) -> None:
    await kubectl.apply(job_name, {**SPEC, "volumes": [{"name": "node", "hostPath": {"path": "/"}}]})

    await _degraded(kubectl, job_name)
    condition = next(c for c in kubectl.status(job_name)["conditions"] if c["type"] == "Degraded")
    assert condition["reason"] == "InvalidSpec"
    assert "spec.volumes[0] (node) is of kind hostPath" in condition["message"]
    assert "--allow-privileged-pods" in condition["message"]
    for kind, name in [(PODS, f"{job_name}-driver-1"), (CONFIG_MAPS, f"{job_name}-lockgate-job")]:
        assert not kubectl.exists(kind, name), f"{name} was created for a refused job"


# Two of what the operator's policy let through before (test_job_policy.py has each):
# one the privileged switch would allow, one refused under any policy.
ADMISSION_GAPS = [
    (
        {
            "podTemplate": {
                "metadata": {
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/executor": "unconfined"}
                }
            }
        },
        "spec.podTemplate.metadata.annotations['container.apparmor.security.beta.kubernetes.io/executor'] is refused",
        "a cluster admin can allow it with the operator's --allow-privileged-pods",
    ),
    (
        {"sparkConf": {"spark.kubernetes.executor.container.image": "elsewhere:1"}},
        "spec.sparkConf['spark.kubernetes.executor.container.image'] is set by the operator",
        "remove it",
    ),
]


@pytest.mark.parametrize(("change", "culprit", "remedy"), ADMISSION_GAPS)
async def test_an_admission_gap_is_refused_naming_the_field_before_anything_is_created(
    kubectl: Kubectl, job_name: str, change: dict[str, Any], culprit: str, remedy: str
) -> None:
    await kubectl.apply(job_name, {**SPEC, **change})

    await _degraded(kubectl, job_name)
    condition = next(c for c in kubectl.status(job_name)["conditions"] if c["type"] == "Degraded")
    assert condition["reason"] == "InvalidSpec"
    assert culprit in condition["message"]
    assert remedy in condition["message"]
    await eventually(lambda: "InvalidSpec" in kubectl.event_reasons(job_name), "a warning event is posted")
    (event,) = [event for event in kubectl.events(job_name) if event[1] == "InvalidSpec"]
    assert event[0] == "Warning"
    assert culprit in event[2]
    for kind, name in [(PODS, f"{job_name}-driver-1"), (CONFIG_MAPS, f"{job_name}-lockgate-job")]:
        assert not kubectl.exists(kind, name), f"{name} was created for a refused job"


async def test_a_job_in_a_namespace_without_pod_security_restricted_starts_once_it_is_labelled(
    cluster: tuple[kmock.KubernetesEmulator, str], kubectl: Kubectl, job_name: str
) -> None:
    """Without the label, the job's code could create any pod its driver's
    ServiceAccount may: the operator creates nothing, says why and what to do, and
    checks again (the label needs no change of the job)."""
    add_namespace(cluster[0], NAMESPACE, {"pod-security.kubernetes.io/enforce": "baseline"})
    await kubectl.apply(job_name, SPEC)

    await _degraded(kubectl, job_name)
    condition = next(c for c in kubectl.status(job_name)["conditions"] if c["type"] == "Degraded")
    assert condition["reason"] == "NamespaceNotRestricted"
    await eventually(
        lambda: "NamespaceNotRestricted" in kubectl.event_reasons(job_name), "a warning event is posted"
    )
    ((kind, _, message),) = [e for e in kubectl.events(job_name) if e[1] == "NamespaceNotRestricted"]
    assert kind == "Warning"
    assert f'namespace {NAMESPACE} does not enforce Pod Security "restricted"' in message
    assert f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=restricted" in message
    assert "--allow-unrestricted-namespaces" in message
    for kind, name in [(PODS, f"{job_name}-driver-1"), (CONFIG_MAPS, f"{job_name}-lockgate-job")]:
        assert not kubectl.exists(kind, name), f"{name} was created in an unrestricted namespace"

    add_namespace(cluster[0], NAMESPACE, RESTRICTED)
    await _launched(kubectl, job_name, 1)
    condition = next(c for c in kubectl.status(job_name)["conditions"] if c["type"] == "Degraded")
    assert condition["status"] == "False"
    assert kubectl.event_reasons(job_name).count("NamespaceNotRestricted") == 1, "said once, not each check"


async def test_the_unrestricted_namespaces_switch_runs_a_job_in_any_namespace(
    cluster: tuple[kmock.KubernetesEmulator, str], kubectl: Kubectl, job_name: str, operator: Operator
) -> None:
    await operator.stop()
    operator.policy = JobPolicy(allow_unrestricted_namespaces=True)
    await operator.start()
    add_namespace(cluster[0], NAMESPACE, {})
    await kubectl.apply(job_name, SPEC)
    await _launched(kubectl, job_name, 1)


async def test_a_job_runs_as_a_service_account_only_once_the_namespace_marked_it(
    kubectl: Kubectl, job_name: str, operator: Operator
) -> None:
    core = client.CoreV1Api(operator.api())
    account = {"metadata": {"name": "uploader"}}
    await asyncio.to_thread(core.create_namespaced_service_account, NAMESPACE, account)
    await kubectl.apply(job_name, {**SPEC, "serviceAccountName": "uploader"})

    await _degraded(kubectl, job_name)
    assert "is not marked for StreamingJobs" in kubectl.status(job_name)["message"]
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")

    marked = {"metadata": {"name": "marked", "annotations": {"lockgate.dev/streaming-jobs": "allowed"}}}
    await asyncio.to_thread(core.create_namespaced_service_account, NAMESPACE, marked)
    other = f"{job_name}-b"
    await kubectl.apply(other, {**SPEC, "serviceAccountName": "marked"})
    pod = await _launched(kubectl, other, 1)
    assert pod["spec"]["serviceAccountName"] == "marked"


async def test_an_account_named_as_the_jobs_driver_account_that_is_not_the_jobs_is_refused_not_adopted(
    kubectl: Kubectl, job_name: str, operator: Operator
) -> None:
    """The operator makes the driver's account `<job>-lockgate`; one of that name made by
    someone else (with a cloud identity, say) was merge-patched into the job's: the
    driver ran with its identity though the namespace never marked it for
    StreamingJobs, and deleting the job deleted the account."""
    core = client.CoreV1Api(operator.api())
    name = f"{job_name}-lockgate"
    identity = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/admin"}
    await asyncio.to_thread(
        core.create_namespaced_service_account,
        NAMESPACE,
        {"metadata": {"name": name, "annotations": identity}},
    )
    await kubectl.apply(job_name, SPEC)

    await _degraded(kubectl, job_name)
    assert (
        f"ServiceAccount {name} exists in namespace {NAMESPACE} and is not this job's"
        in (kubectl.status(job_name)["message"])
    )
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    account = await asyncio.to_thread(core.read_namespaced_service_account, name, NAMESPACE)
    assert not account.metadata.owner_references, "the account was not made the job's"


async def test_deletion_removes_the_driver_and_the_jobs_etcd_keys(
    kubectl: Kubectl, job_name: str, etcd: Etcd, tmp_path: Path
) -> None:
    await _created(kubectl, job_name)
    keys = JobKeys(NAMESPACE, job_name)
    await etcd.put(keys.latest, b"3")  # something a driver left behind
    checkpoint = tmp_path / "checkpoints" / NAMESPACE / job_name / "chk-3"
    checkpoint.mkdir(parents=True)
    await kubectl.delete(job_name)
    await eventually(lambda: not kubectl.exists(JOBS, job_name), "the job is gone")
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    assert await etcd.get_prefix(keys.root) == []
    assert checkpoint.is_dir(), "checkpoint files are kept by default"


async def test_deletion_can_take_a_final_savepoint_and_remove_checkpoints(
    kubectl: Kubectl, job_name: str, etcd: Etcd, tmp_path: Path
) -> None:
    await kubectl.apply(job_name, {**SPEC, "deletion": {"savepoint": True, "checkpoints": "delete"}})
    await _launched(kubectl, job_name, 1)
    checkpoint = tmp_path / "checkpoints" / NAMESPACE / job_name / "chk-3"
    checkpoint.mkdir(parents=True)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.delete(job_name)
        await eventually(lambda: not kubectl.exists(JOBS, job_name), "the job is gone")
    ((request_id, request),) = driver.requests
    assert (request_id, request.stop) == ("delete-l1", True)
    assert not checkpoint.parent.exists(), "the job's checkpoint directory is removed"


@pytest.mark.parametrize(("mode", "flag"), [("last-state", None), ("stateless", "--fresh")])
async def test_other_upgrade_modes_take_no_savepoint(
    kubectl: Kubectl, job_name: str, etcd: Etcd, mode: str, flag: str | None
) -> None:
    await kubectl.apply(job_name, {**SPEC, "upgradeMode": mode})
    await _launched(kubectl, job_name, 1)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.patch_spec(job_name, {"replicas": 3})
        pod = await _launched(kubectl, job_name, 2)
    assert driver.requests == []
    args = driver_args(pod)
    assert "--from-savepoint" not in args
    assert (flag in args) if flag else ("--fresh" not in args)
    assert _conf(pod, "spark.executor.instances") == "3"


def _imports(args: list[str]) -> str | None:
    """The savepoint a driver restores although its job's key did not sign it."""
    return args[args.index("--from-savepoint") + 1] if "--import-unsigned-savepoint" in args else None


async def test_a_savepoint_from_before_signing_is_imported_once_then_the_job_goes_on_signed(
    kubectl: Kubectl, job_name: str, etcd: Etcd, tmp_path: Path
) -> None:
    """An upgrade from a Lockgate that did not sign snapshots: the job names the
    savepoint it vouches for, and only that one is restored unsigned."""
    old = f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints/{job_name}/savepoint-old"
    await kubectl.apply(job_name, {**SPEC, "job": {**SPEC["job"], "importUnsignedSavepoint": old}})
    assert _imports(driver_args(await _launched(kubectl, job_name, 1))) == old
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name))
    async with driver.running():
        await kubectl.patch_spec(job_name, {"replicas": 3})  # an ordinary rescale after the import
        rescaled = driver_args(await _launched(kubectl, job_name, 2))
    assert "--from-savepoint" in rescaled
    assert _imports(rescaled) is None, "its own, signed savepoint"
    other = f"{old}-2"
    await kubectl.patch_spec(job_name, {"job": {**SPEC["job"], "importUnsignedSavepoint": other}})
    imported = driver_args(await _launched(kubectl, job_name, 3))
    assert _imports(imported) == other, "a new value is imported at once"
    assert len(driver.requests) == 1, "no savepoint is taken to be thrown away"
    await kubectl.patch_spec(job_name, {"job": {"importUnsignedSavepoint": None}})  # removed: no restart
    await eventually(
        lambda: (
            kubectl.status(job_name).get("observedGeneration")
            == kubectl.job(job_name)["metadata"]["generation"]
        ),
        "the change is observed",
    )
    assert kubectl.status(job_name)["launch"] == 3


@pytest.mark.parametrize("field", ["spec.job.importUnsignedSavepoint", "spec.initialSavepointPath"])
async def test_a_savepoint_to_restore_from_another_namespaces_directory_is_refused(
    kubectl: Kubectl, job_name: str, field: str
) -> None:
    theirs = "file:///elsewhere/other-team/savepoint-1"
    if field == "spec.initialSavepointPath":
        spec = {**SPEC, "initialSavepointPath": theirs}
    else:
        spec = {**SPEC, "job": {**SPEC["job"], "importUnsignedSavepoint": theirs}}
    await kubectl.apply(job_name, spec)
    await _degraded(kubectl, job_name)
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    assert field in kubectl.status(job_name)["message"]


async def test_a_new_job_starts_from_its_initial_savepoint_and_a_later_change_of_it_restarts_nothing(
    kubectl: Kubectl, job_name: str, etcd: Etcd, tmp_path: Path
) -> None:
    """Failed before: a cluster job could not start from a savepoint."""
    directory = f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints"
    initial = f"{directory}/sums-before/savepoint-upgrade-g3-l3-0a1b2c3d"
    await kubectl.apply(job_name, {**SPEC, "initialSavepointPath": initial})
    assert _imports(driver_args(await _launched(kubectl, job_name, 1))) == initial
    await eventually(lambda: "LaunchingDriver" in kubectl.event_reasons(job_name), "the launch is told")
    launching = next(m for _, r, m in kubectl.events(job_name) if r == "LaunchingDriver")
    assert launching == f"initial savepoint: launch 1, restoring {initial}"
    async with StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name)).running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: _ready(kubectl, job_name), "launch 1 is Ready")
        await kubectl.patch_spec(job_name, {"initialSavepointPath": f"{directory}/sums-before/savepoint-x"})
        await eventually(
            lambda: kubectl.status(job_name).get("observedGeneration") == 2, "the change is observed"
        )
    assert kubectl.status(job_name)["launch"] == 1, "only a first launch reads it"


async def test_periodic_savepoints_are_taken_while_the_job_runs(
    kubectl: Kubectl, job_name: str, etcd: Etcd, tmp_path: Path
) -> None:
    directory = f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints/{job_name}"
    await kubectl.apply(job_name, {**SPEC, "savepoints": {"interval": "1s", "historySize": 2}})
    await _launched(kubectl, job_name, 1)
    driver = StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name), savepoint_dir=directory)
    async with driver.running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(
            lambda: "SavepointDisposed" in kubectl.event_reasons(job_name),
            "three periodic savepoints, the first one disposed of",
            timeout_s=20,
        )
    status = kubectl.status(job_name)
    assert [entry["reason"] for entry in status["savepoints"]] == ["periodic", "periodic"]
    assert all(not request.stop for _, request in driver.requests)
    assert status["launch"] == 1, "the job runs on"
    assert undeclared_status_fields(status) == []


async def test_a_restart_nonce_restarts_from_the_latest_checkpoint(kubectl: Kubectl, job_name: str) -> None:
    await _created(kubectl, job_name)
    await kubectl.patch_spec(job_name, {"restartNonce": 1})
    pod = await _launched(kubectl, job_name, 2)
    assert not kubectl.exists(PODS, f"{job_name}-driver-1")
    assert "--from-savepoint" not in driver_args(pod)
    assert _conf(pod, "spark.executor.instances") == "2", "same spec, new driver"


async def test_a_lost_driver_is_relaunched_each_time_it_is_lost(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    """Lost drivers are relaunched by the operator's backoff: the job's restart
    strategy (one attempt here) is its job master's, for its tasks' failures."""
    strategy = {"type": "fixed-delay", "attempts": 1, "delay": "100ms"}
    await kubectl.apply(job_name, {**SPEC, "restartStrategy": strategy})
    await _launched(kubectl, job_name, 1)
    async with StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name)).running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: kubectl.status(job_name).get("phase") == "Running", "the job is Running")
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Failed")
        pod = await _launched(kubectl, job_name, 2)
    assert "--from-savepoint" not in driver_args(pod), "restarts from the latest checkpoint"
    assert kubectl.status(job_name)["driverRestarts"] == 1
    await kubectl.set_pod_phase(f"{job_name}-driver-2", "Failed")  # and again: relaunched again
    await _launched(kubectl, job_name, 3)
    assert kubectl.status(job_name)["driverRestarts"] == 2
    assert [(kind, reason) for kind, reason, _ in kubectl.events(job_name)][:5] == [
        ("Normal", "LaunchingDriver"),
        ("Normal", "Running"),
        ("Warning", "Restarting"),
        ("Normal", "StoppingDriver"),
        ("Normal", "LaunchingDriver"),
    ]
    restarting = next(message for _, reason, message in kubectl.events(job_name) if reason == "Restarting")
    assert restarting == "driver failed without a word; relaunch 1 in 0.1 s"


async def test_a_lost_driver_is_restarted_while_a_new_spec_is_refused(
    kubectl: Kubectl, job_name: str, etcd: Etcd
) -> None:
    """Failed before: the restart strategy was read from the refused spec, so the
    lost driver was never restarted (every observation failed) until the spec was fixed."""
    await _created(kubectl, job_name)
    async with StandInDriver(kubectl, etcd, JobKeys(NAMESPACE, job_name)).running():
        await _running_then_refused(kubectl, job_name)
        await kubectl.patch_spec(job_name, {"restartStrategy": {"type": "fixed-delay", "delay": "100ms"}})
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Failed")
        pod = await _launched(kubectl, job_name, 2)
    assert "lots" not in json.dumps(pod), "launched by the spec that ran"
    assert json.loads(kubectl.status(job_name)["acceptedSpec"]) == SPEC


def _observations(operator: Operator) -> Callable[[], float]:
    """How many times the operator has observed its jobs so far."""
    assert operator.context is not None
    registry = operator.context.metrics.registry

    def count() -> float:
        labels = {"handler": "observe", "result": "ok"}
        return registry.get_sample_value("lockgate_operator_reconciles_total", labels) or 0.0

    return count


async def _observed_again(operator: Operator, times: int) -> None:
    observations = _observations(operator)
    before = observations()
    await eventually(lambda: observations() >= before + times, f"{times} more observations")


async def test_a_pending_driver_is_not_taken_for_lost(
    kubectl: Kubectl, job_name: str, operator: Operator
) -> None:
    await kubectl.apply(job_name, {**SPEC, "restartStrategy": {"type": "fixed-delay", "delay": "100ms"}})
    await _launched(kubectl, job_name, 1)
    await _observed_again(operator, 5)
    assert kubectl.status(job_name)["phase"] == "Deploying"
    assert not kubectl.exists(PODS, f"{job_name}-driver-2")


async def test_what_a_lost_driver_said_is_not_taken_for_its_successor(
    kubectl: Kubectl, job_name: str, etcd: Etcd, operator: Operator
) -> None:
    await kubectl.apply(job_name, {**SPEC, "restartStrategy": {"type": "fixed-delay", "delay": "100ms"}})
    await _launched(kubectl, job_name, 1)
    keys = JobKeys(NAMESPACE, job_name)
    first = StandInDriver(kubectl, etcd, keys, launch=1)
    async with first.running():
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Running")
        await eventually(lambda: kubectl.status(job_name).get("phase") == "Running", "the job is Running")
        await kubectl.set_pod_phase(f"{job_name}-driver-1", "Failed")
        await _launched(kubectl, job_name, 2)

    # Driver 2 is starting (its JVM, its Spark session) and has said nothing yet:
    # driver 1's failure, still recorded, is neither a loss of driver 2 nor Running.
    await kubectl.set_pod_phase(f"{job_name}-driver-2", "Running")
    await _observed_again(operator, 5)
    status = kubectl.status(job_name)
    assert status["phase"] == "Deploying", status.get("message")
    assert status["driverRestarts"] == 1
    assert not kubectl.exists(PODS, f"{job_name}-driver-3")

    async with StandInDriver(kubectl, etcd, keys, launch=2).running():
        await eventually(lambda: kubectl.status(job_name).get("phase") == "Running", "driver 2 is Running")
    assert kubectl.status(job_name)["launch"] == 2
