"""`kubectl scale` on a job: savepoint, stop, restart at the new parallelism with
the state redistributed by key group — and not a word counted twice or lost.
The executors are pods Spark creates: they follow the replicas. Checkpoints,
savepoints and output are in S3 (moto's server), the credentials in a Secret."""

from __future__ import annotations

import pytest

from e2e.executor_pods import executors_are, executors_gone
from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob, snapshot_metadata


async def _rescaled(job: WordCountJob, kubectl: Kubectl, platform: Platform, launch: int, to: int) -> None:
    await kubectl.scale(job.name, to)
    status = await job.running(launch=launch, replicas=to)
    deployment, savepoint = status["deployment"], status["lastSavepoint"]
    assert (deployment["restore"], deployment["savepoint"]) == ("savepoint", savepoint["path"])
    assert savepoint["reason"] == "upgrade"
    assert savepoint["path"].startswith(job.checkpoints), "savepoints go under the job's storage"
    assert snapshot_metadata(savepoint["path"]).kind == "savepoint"
    previous = job.driver_pod(launch - 1)
    assert await kubectl.pod(previous) is None, "the old driver's pod is gone"
    assert await platform.driver_stopped(previous)
    driver = await job.driver_says()
    assert driver is not None
    assert (driver.state, driver.parallelism) == ("running", to)
    pod = await kubectl.pod(job.driver_pod(launch))
    assert pod is not None
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--parallelism") + 1] == str(to)
    assert f"spark.executor.instances={to}" in args
    await executors_are(kubectl, job, launch=launch, count=to)
    await executors_gone(kubectl, job, launch=launch - 1)


@pytest.fixture
def executor_pods() -> bool:
    return True


@pytest.fixture
def object_storage() -> bool:
    return True


@pytest.mark.timeout(900)  # three launches, each starting a driver and its executor pods
async def test_scaling_up_and_down_carries_the_state_over_exactly(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await executors_are(kubectl, job, launch=1, count=2)
    await job.output_is_exact()

    job.words.append()  # in flight while the savepoint is taken
    await _rescaled(job, kubectl, platform, launch=2, to=4)
    job.words.append()
    await job.output_is_exact()

    job.words.append()
    await _rescaled(job, kubectl, platform, launch=3, to=1)
    job.words.append()
    await job.output_is_exact()
    status = await job.status()
    assert [s["reason"] for s in status["savepoints"]] == ["upgrade", "upgrade"]
    assert status["maxParallelism"] == 64, "the key groups never change"
