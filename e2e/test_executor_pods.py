"""The executors are pods: Spark's Kubernetes backend in the driver creates one
per replica through the API server, owned by the driver pod, and each runs one
of the job's tasks; they follow a rescale, a lost one is replaced, and they go
when their driver pod goes."""

from __future__ import annotations

import re

import pytest

from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob
from tests.polling import eventually_true

TASK_STARTED = re.compile(r"Running task \d+\.\d+ in stage")  # what a Spark executor logs per task


@pytest.fixture
def executor_pods() -> bool:
    return True


async def test_spark_creates_an_executor_pod_per_replica_owned_by_the_driver_pod(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
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
        assert pod["status"]["phase"] == "Running"
        log = await platform.pod_log(pod["metadata"]["name"])
        assert len(TASK_STARTED.findall(log)) == 1, f"{pod['metadata']['name']} runs one task"
    addresses = {pod["status"]["podIP"] for pod in [driver, *executors]}
    assert len(addresses) == 3, "every pod has an address of its own"

    job.words.append()
    await job.output_is_exact()


async def _executor_pods(kubectl: Kubectl, job: WordCountJob, launch: int) -> list[str]:
    """The names of the running executor pods Spark created for driver `launch`."""
    pods = await kubectl.pods(job.names.executor_selector)
    prefix = f"{job.name}-{launch}-exec-"  # spark.kubernetes.executor.podNamePrefix
    return [
        pod["metadata"]["name"]
        for pod in pods
        if pod["metadata"]["name"].startswith(prefix)
        and pod["status"].get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    ]


async def _executors_are(kubectl: Kubectl, job: WordCountJob, launch: int, count: int) -> None:
    async def there() -> bool:
        return len(await _executor_pods(kubectl, job, launch)) == count

    await eventually_true(there, f"{count} executor pods of launch {launch}", 120, 0.3)


async def test_scaled_jobs_get_as_many_executor_pods_as_replicas(job: WordCountJob, kubectl: Kubectl) -> None:
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await _executors_are(kubectl, job, launch=1, count=2)
    for launch, replicas in ((2, 4), (3, 1)):
        job.words.append()
        await kubectl.scale(job.name, replicas)
        await job.running(launch=launch, replicas=replicas)
        await _executors_are(kubectl, job, launch=launch, count=replicas)
        await _executors_are(kubectl, job, launch=launch - 1, count=0)
        job.words.append()
        await job.output_is_exact()


async def test_a_deleted_executor_pod_is_replaced_and_the_job_recovers_exactly(
    job: WordCountJob, kubectl: Kubectl
) -> None:
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await job.output_is_exact()
    await job.next_checkpoint()
    await _executors_are(kubectl, job, launch=1, count=2)
    lost = (await _executor_pods(kubectl, job, launch=1))[0]

    job.words.append()  # in flight when the executor goes
    await kubectl.delete_pod(lost)

    async def replaced() -> bool:
        names = await _executor_pods(kubectl, job, launch=1)
        return len(names) == 2 and lost not in names

    await eventually_true(replaced, f"Spark replaces {lost}", 120, 0.3)
    job.words.append()
    await job.output_is_exact()
    assert (await job.status())["launch"] == 1, "the driver recovers its job itself: no new launch"


async def test_a_killed_drivers_executor_pods_go_with_it(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await _executors_are(kubectl, job, launch=1, count=2)

    job.words.append()
    await platform.kill_driver(job.driver_pod(1))
    await job.running(launch=2, replicas=2)
    await _executors_are(kubectl, job, launch=2, count=2)

    async def collected() -> bool:
        pods = await kubectl.pods(job.names.executor_selector)
        return not [p for p in pods if p["metadata"]["name"].startswith(f"{job.name}-1-exec-")]

    await eventually_true(collected, "the killed driver's executor pods are gone", 120, 0.3)
    job.words.append()
    await job.output_is_exact()
