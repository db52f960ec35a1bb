"""Suspending a job stops it with a savepoint; resuming starts it from there."""

from __future__ import annotations

from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob, snapshot_metadata
from e2e.words import committed


async def test_suspend_stops_with_a_savepoint_and_resume_continues_from_it(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    job.words.append()
    await job.apply()
    await job.running(launch=1)
    await job.output_is_exact()

    await kubectl.patch(job.name, {"state": "suspended"})
    status = await job.wait_for(lambda s: s.get("phase") == "Suspended", "Suspended")
    savepoint = status["suspendedWith"]
    assert status["lastSavepoint"] == {**status["lastSavepoint"], "path": savepoint, "reason": "suspend"}
    assert snapshot_metadata(savepoint).kind == "savepoint"
    assert await kubectl.pod(job.driver_pod(1)) is None
    assert await platform.driver_stopped(job.driver_pod(1))
    before = committed(job.output)
    job.words.append()  # arrives while nothing runs
    assert await kubectl.driver_pods(job.name) == [], "a suspended job has no driver"

    await kubectl.patch(job.name, {"state": "running"})
    status = await job.running(launch=2)
    assert (status["deployment"]["restore"], status["deployment"]["savepoint"]) == ("savepoint", savepoint)
    assert "suspendedWith" not in status
    await job.output_is_exact()
    assert committed(job.output) - before, "the lines that came while suspended are counted after resuming"
