"""A job's life as a user lives it: apply it, watch it checkpoint, take a
savepoint on demand, make a mistake in its spec, delete it."""

from __future__ import annotations

from pathlib import Path

from e2e.emulated import EmulatedCluster
from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.rbac import operator_calls
from e2e.word_count_job import WordCountJob, snapshot_metadata
from tests.polling import eventually_true


def _condition(status: dict[str, object], kind: str) -> dict[str, str]:
    conditions = status.get("conditions") or []
    assert isinstance(conditions, list)
    return next((c for c in conditions if c.get("type") == kind), {})


async def test_an_applied_job_runs_checkpoints_and_commits_its_output_exactly(
    job: WordCountJob, kubectl: Kubectl
) -> None:
    job.words.append()
    await job.apply()
    status = await job.running(launch=1, replicas=2)
    assert status["deployment"] == {"launch": 1, "restore": "latest"}, "a new job starts empty"
    assert _condition(status, "Ready")["status"] == "True"
    first = await job.next_checkpoint()
    await job.output_is_exact()
    job.words.append()
    assert await job.next_checkpoint() > first
    await job.output_is_exact()
    pod = await kubectl.pod(job.driver_pod(1))
    assert pod is not None
    assert pod["status"]["phase"] == "Running"
    assert (await job.status())["lastCheckpoint"]["bytes"] > 0
    driver = await job.driver_says()
    assert driver is not None
    assert (driver.state, driver.parallelism) == ("running", 2)


async def test_a_savepoint_trigger_records_a_whole_savepoint_and_the_job_runs_on(
    job: WordCountJob, kubectl: Kubectl
) -> None:
    job.words.append()
    await job.apply()
    await job.running(launch=1)
    await kubectl.patch(job.name, {"savepoints": {"triggerNonce": 1}})
    status = await job.wait_for(lambda s: bool(s.get("savepoints")), "a savepoint in the history")
    (savepoint,) = status["savepoints"]
    assert savepoint["reason"] == "trigger nonce 1"
    assert status["lastSavepoint"] == savepoint
    metadata = snapshot_metadata(savepoint["path"])
    assert (metadata.kind, metadata.job_id) == ("savepoint", job.name)
    assert {"count", "lines"} <= set(metadata.vertices), "the keyed counts and the log offsets are in it"
    job.words.append()
    await job.output_is_exact()
    assert (await job.status())["launch"] == 1, "a savepoint on demand does not restart the job"


async def test_an_invalid_change_is_reported_and_the_job_keeps_running(
    job: WordCountJob, kubectl: Kubectl
) -> None:
    job.words.append()
    await job.apply()
    await job.running(launch=1)
    await kubectl.patch(job.name, {"maxParallelism": 128})
    status = await job.wait_for(
        lambda s: _condition(s, "Degraded").get("status") == "True", "the change is reported Degraded"
    )
    message = _condition(status, "Degraded")["message"]
    assert "maxParallelism cannot change from 64 to 128" in message, message
    job.words.append()
    await job.output_is_exact()
    status = await job.status()
    assert (status["phase"], status["launch"]) == ("Running", 1), "the last good spec keeps running"

    await kubectl.patch(job.name, {"maxParallelism": 64})
    await job.wait_for(
        lambda s: _condition(s, "Degraded").get("status") == "False", "the fix clears the condition"
    )
    job.words.append()
    await job.output_is_exact()
    assert (await job.status())["launch"] == 1, "undoing a change that never ran restarts nothing"


async def test_deleting_a_job_stops_its_driver_and_forgets_its_etcd_keys(
    job: WordCountJob, kubectl: Kubectl, platform: Platform
) -> None:
    job.words.append()
    await kubectl.apply(job.name, {**job.spec(), "deletion": {"savepoint": True}})
    await job.running(launch=1)
    await job.output_is_exact()
    assert await job.etcd_keys(), "a running job has keys in etcd"
    await kubectl.delete(job.name)

    async def gone() -> bool:
        return await kubectl.job(job.name) is None

    await eventually_true(gone, "the finalizer has run and the job is gone", 120, 0.2)
    assert await kubectl.pod(job.driver_pod(1)) is None
    assert await platform.driver_stopped(job.driver_pod(1))
    assert await job.etcd_keys() == []
    savepoints = Path(platform.shared, "checkpoints", platform.namespace, "_savepoints", job.name)
    (final,) = list(savepoints.iterdir())
    assert snapshot_metadata(f"file://{final}").kind == "savepoint", "the final savepoint is whole"
    await job.output_is_exact()
    if isinstance(platform, EmulatedCluster):  # the emulator enforced the chart's rules on every call
        assert not operator_calls(platform.emulator.refused), "the operator was refused what it needed"
