"""A driver that dies is replaced by the operator, restoring the latest completed
checkpoint: what was in flight is replayed, and committed once. Its executor
pods go with its pod; the new driver gets new ones."""

from __future__ import annotations

from datetime import datetime

import pytest

from e2e.executor_pods import executors_are, executors_gone
from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob


@pytest.fixture
def executor_pods() -> bool:
    return True


@pytest.mark.timeout(600)  # two launches, each starting a driver and its executor pods
async def test_a_killed_driver_is_restarted_from_the_latest_checkpoint(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    job.words.append()
    await job.apply()
    await job.running(launch=1)
    await executors_are(kubectl, job, launch=1, count=2)
    await job.output_is_exact()
    checkpoint = await job.next_checkpoint()

    job.words.append()  # read, perhaps written, not yet committed when the driver dies
    await platform.kill_driver(job.driver_pod(1))
    failed = await job.wait_for(lambda s: s.get("phase") == "Restarting", "the lost driver is noticed")
    assert "driver failed" in failed["message"]
    pod = await kubectl.pod(job.driver_pod(1))
    assert pod is None or pod["status"]["phase"] == "Failed"

    status = await job.running(launch=2)
    assert status["deployment"]["restore"] == "latest"
    started = (await kubectl.pod(job.driver_pod(2)) or {})["status"]["startTime"]
    driver = await job.driver_says()
    assert driver is not None
    assert driver.at_ms >= datetime.fromisoformat(started).timestamp() // 1 * 1000, (
        "Running only once the new driver beats, not on the killed one's lingering heartbeat"
    )
    assert status["driverRestarts"] == 1
    await executors_are(kubectl, job, launch=2, count=2)
    await executors_gone(kubectl, job, launch=1)  # garbage-collected with the killed driver's pod
    await job.output_is_exact()
    assert (await job.next_checkpoint()) > checkpoint, "checkpoint ids go on from the restored one"
