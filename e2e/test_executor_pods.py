"""The executors are pods: Spark's Kubernetes backend in the driver creates one
per replica through the API server, owned by the driver pod, and each runs one
of the job's tasks."""

from __future__ import annotations

import re

import pytest

from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob

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
