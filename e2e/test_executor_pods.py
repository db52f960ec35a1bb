"""The executors are pods: Spark's Kubernetes backend in the driver creates one
per replica through the API server, owned by the driver pod, each running one of
the job's tasks; a lost one is replaced and the job recovers exactly."""

from __future__ import annotations

import re

import pytest
from lockgate.operator.owned import role

from e2e.emulated import EmulatedCluster
from e2e.executor_pods import executors_are, running_executor_pods
from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob
from tests.helm.chart import render
from tests.helm.job_pod_policy import JobPodPolicy, service_account_user
from tests.pod_security import restricted_violations
from tests.polling import eventually_true

# Spark deletes an executor pod it gave up on (a lost executor whose pod is still there)
# and, when it stops before its driver pod goes, the ConfigMap it made.
UNSEEN_BUT_NEEDED = {("delete", "pods"), ("delete", "configmaps")}
TASK_STARTED = re.compile(r"Running task \d+\.\d+ in stage")  # what a Spark executor logs per task


@pytest.fixture
def executor_pods() -> bool:
    return True


@pytest.mark.timeout(600)  # a lost executor: Spark's replacement pod, then the stage relaunched
async def test_executor_pods_one_per_replica_owned_by_the_driver_a_deleted_one_replaced_exactly(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    """One job shows all of it, since each job's start costs its pods' start: the
    pods Spark creates, a lost one replaced with the output exact, and the clean-up
    when the job is deleted, within the Role the operator gave it."""
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await job.output_is_exact()

    driver = await kubectl.pod(job.driver_pod(1))
    assert driver is not None
    executors = await kubectl.pods(job.names.executor_selector)
    assert len(executors) == 2, [pod["metadata"]["name"] for pod in executors]
    for pod in executors:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "Pod",
            driver["metadata"]["name"],
            driver["metadata"]["uid"],
        )
        assert pod["metadata"]["labels"]["spark-role"] == "executor"
        env = {variable["name"] for variable in pod["spec"]["containers"][0].get("env", [])}
        assert "_SPARK_AUTH_SECRET" in env, "Spark's RPC authentication is on: executors get its secret"
        assert pod["status"]["phase"] == "Running"
        log = await platform.pod_log(pod["metadata"]["name"])
        assert len(TASK_STARTED.findall(log)) == 1, f"{pod['metadata']['name']} runs one task"
    addresses = {pod["status"]["podIP"] for pod in [driver, *executors]}
    assert len(addresses) == 3, "every pod has an address of its own"
    for pod in [driver, *executors]:  # Spark merges its executor pods into the operator's template
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
    policy, accounts = JobPodPolicy(render()), await kubectl.service_accounts()
    requester = service_account_user(kubectl.namespace, job.names.service_account)
    for pod in executors:  # the chart's admission policy lets the driver create them
        decision = policy.decide(pod, requester, kubectl.namespace, accounts)
        assert (decision.applies, decision.denials) == (True, []), pod["metadata"]["name"]

    await job.next_checkpoint()
    lost, _ = await executors_are(kubectl, job, launch=1, count=2)
    job.words.append()  # in flight when the executor goes
    await kubectl.delete_pod(lost)

    async def replaced() -> bool:
        names = await running_executor_pods(kubectl, job, launch=1)
        return len(names) == 2 and lost not in names

    await eventually_true(replaced, f"Spark replaces {lost}", 180, 0.3)
    job.words.append()
    await job.output_is_exact()
    status = await job.status()
    assert status["launch"] == 1, "the driver recovers its job itself: no new launch"
    assert status["phase"] == "Running"

    await kubectl.delete(job.name)  # Spark's driver stops and cleans up after itself

    async def stopped() -> bool:
        return await kubectl.job(job.name) is None and await platform.driver_stopped(job.driver_pod(1))

    await eventually_true(stopped, "the job is gone and its driver stopped", 120)
    if isinstance(platform, EmulatedCluster):  # the emulator saw every call Spark's driver made
        _spark_needs_no_more_than_its_role(platform, job)


def _spark_needs_no_more_than_its_role(platform: EmulatedCluster, job: WordCountJob) -> None:
    """Least privilege, checked against what Spark really does with the job's Role
    enforced (e2e/emulated.py): the job ran (above) while Spark was refused only its
    clean-up by label when it stopped, and the Role grants nothing Spark never used."""
    calls = {(c.verb, c.resource) for c in platform.emulator.calls if "fabric8" in c.client}
    assert calls, f"no call from Spark's Kubernetes client among {platform.emulator.calls}"
    refused = {(c.verb, c.resource) for c in platform.emulator.refused}
    assert {verb for verb, _ in refused} <= {"deletecollection"}, f"Spark was refused {sorted(refused)}"
    granted = {
        (verb, resource)
        for rule in role(job.names)["rules"]
        for verb in rule["verbs"]
        for resource in rule["resources"]
    }
    unused = granted - calls - UNSEEN_BUT_NEEDED
    assert not unused, f"the Role grants what Spark never used: {sorted(unused)}"
