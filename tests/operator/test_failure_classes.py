"""Each class of failure through the operator: the operator's logic on a real etcd
and an in-memory Kubernetes API, and each driver pod it launches run by the real
driver (`driver_in_process.py`: its tasks as threads in place of Spark's stage).
A driver that ends the job with a failure is never relaunched — the job's restart
strategy was applied once, by its job master — and a driver that was lost is."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lockgate.operator import reconcile
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, VertexState, write_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.operator.cluster_helpers import NAMESPACE, SPEC, StandInDriver
from tests.operator.driver_in_process import CountingStage, run_driver_pod
from tests.operator.job_under_test import JobUnderTest

ENOUGH_LAUNCHES = 20  # more than any strategy here allows: a relaunch loop shows as 20


async def _operate(
    under_test: JobUnderTest, spec: dict[str, Any], root: Path, stage: ThreadStage
) -> list[int]:
    """Create the job, then observe it as the operator's timer does, running each
    driver it launches to its end, until the job is Failed; the drivers' exit codes."""
    await reconcile.on_create(await under_test.job(spec))
    exits: list[int] = []
    while len(exits) < ENOUGH_LAUNCHES:
        status = under_test.status()
        launch = int(status.get("launch", 0))
        pod = under_test.pod(launch)
        if pod is not None and "status" not in pod:  # created, not started yet
            exits.append(
                await run_driver_pod(under_test.kube, f"{under_test.name}-driver-{launch}", root, stage)
            )
        elif status.get("phase") == "Failed":
            break
        elif status.get("restartAt"):  # the delay before a relaunch is not what these tests are about
            await under_test.kube.patch_status(NAMESPACE, under_test.name, {"restartAt": time.time() - 1})
        await reconcile.observe(await under_test.job(spec))
    return exits


async def _not_relaunched(under_test: JobUnderTest, spec: dict[str, Any], generation: int = 1) -> None:
    launch = int(under_test.status()["launch"])
    for _ in range(3):
        await reconcile.observe(await under_test.job(spec, generation))
    assert under_test.status()["phase"] == "Failed"
    assert int(under_test.status()["launch"]) == launch
    assert under_test.pod(launch + 1) is None, "never relaunched"


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def _failed_events(under_test: JobUnderTest) -> list[str]:
    return [message for kind, reason, message in under_test.events.events if reason == "JobFailed"]


async def test_a_job_whose_code_does_not_import_is_failed_and_not_relaunched(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    """Failed before: the driver's refusal was taken for a lost driver, relaunched by
    the job's restart strategy again and again (forever under exponential backoff)."""
    spec = {**SPEC, "job": {"entrypoint": "tests.operator.unimportable_job:build"}}
    exits = await _operate(under_test, spec, tmp_path / "pods", ThreadStage())
    assert exits == [2], "one launch, refused before its tasks start"
    status = under_test.status()
    assert status["failure"]["class"] == "code"
    assert "import lockgate_pricing_tables" in status["failure"]["traceback"]
    assert "ModuleNotFoundError" in status["failure"]["traceback"]
    assert _ready(status)["reason"] == "CodeFailure"
    (event,) = _failed_events(under_test)
    assert event.startswith(f"driver {under_test.name}-driver-1 failed (code failure): job tests.operator")
    await _not_relaunched(under_test, spec)
    assert len(_failed_events(under_test)) == 1, "one Warning, not one per observation"


async def test_a_job_whose_state_does_not_fit_is_failed_and_not_relaunched(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    """Failed before: relaunched by the restart strategy, each launch refused alike."""
    savepoint = f"file://{tmp_path}/checkpoints/{NAMESPACE}/imports/savepoint-7"
    storage = CheckpointStorage(savepoint)
    taken_with_128 = CheckpointMetadata(
        "other", 7, "savepoint", int(time.time() * 1000), {"sum": VertexState(2, 128, ())}, NAMESPACE
    )
    write_metadata(storage, storage.root, taken_with_128, None)
    job = {"entrypoint": "examples.sums:build", "args": {"count": "50", "output": f"file://{tmp_path}/out"}}
    spec = {**SPEC, "job": job, "maxParallelism": 64, "initialSavepointPath": savepoint}
    exits = await _operate(under_test, spec, tmp_path / "pods", ThreadStage())
    assert exits == [2]
    status = under_test.status()
    assert status["failure"]["class"] == "restore"
    assert "max parallelism 128" in status["failure"]["message"]
    assert "traceback" not in status["failure"], "the job's code is not to blame"
    assert _ready(status)["reason"] == "RestoreFailure"
    await _not_relaunched(under_test, spec)


async def test_fixed_delay_three_is_four_launches_in_all(under_test: JobUnderTest, tmp_path: Path) -> None:
    """Failed before: the job master restarted the job 3 times, then the operator
    relaunched the driver by the same strategy 3 times, each restarting it 3 times:
    16 launches."""
    spec = {
        **SPEC,
        "job": {
            "entrypoint": "tests.operator.failing_jobs:build",
            "args": {"output": f"file://{tmp_path}/out"},
        },
        "restartStrategy": {"type": "fixed-delay", "attempts": 3, "delay": "100ms"},
    }
    stage = CountingStage()
    exits = await _operate(under_test, spec, tmp_path / "pods", stage)
    assert stage.launches == 4, "the first launch and 3 restarts"
    assert exits == [1], "one driver"
    status = under_test.status()
    assert status["failure"]["class"] == "transient"
    assert _ready(status)["reason"] == "RestartsExhausted"
    assert "gave up after 3 restart(s)" in status["failure"]["message"]
    traceback = status["failure"]["traceback"]
    assert "in _price" in traceback
    assert "ValueError: no price for record" in traceback
    await _not_relaunched(under_test, spec)


async def test_a_lost_driver_is_relaunched_whatever_the_jobs_restart_strategy(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """A driver killed without a word (its pod deleted, its node lost) is relaunched
    each time, by the operator's backoff. Failed before: the job's own strategy
    (here: none) counted the loss, and the job was Failed."""
    spec = {**SPEC, "restartStrategy": {"type": "none"}}
    await under_test.running(spec)
    for launch in (1, 2):
        async with StandInDriver(under_test.kube, etcd, under_test.keys, launch=launch).running():
            await under_test.kube.set_pod_phase(f"{under_test.name}-driver-{launch}", "Running")
            await reconcile.observe(await under_test.job(spec))
            assert under_test.status()["phase"] == "Running"
            await under_test.kube.delete_pod(NAMESPACE, f"{under_test.name}-driver-{launch}")
            await reconcile.observe(await under_test.job(spec))
        status = under_test.status()
        assert status["phase"] == "Restarting", status.get("message")
        assert _ready(status)["reason"] == "Restarting"
        await under_test.kube.patch_status(NAMESPACE, under_test.name, {"restartAt": time.time() - 1})
        await reconcile.observe(await under_test.job(spec))
        assert under_test.pod(launch + 1) is not None, f"relaunch {launch}"
    assert under_test.status()["driverRestarts"] == 2
    assert "failure" not in under_test.status()
    assert under_test.events.reasons().count("Restarting") == 2


async def test_a_savepoint_the_jobs_key_did_not_sign_is_failed_and_not_relaunched(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    """A suspended job resumes from the savepoint it was suspended with; one its key
    did not sign (another job's, here put in its place) is a trust failure. Failed
    before: relaunched by the restart strategy, each launch refused alike."""
    job = {"entrypoint": "examples.sums:build", "args": {"count": "50", "output": f"file://{tmp_path}/out"}}
    spec = {**SPEC, "job": job}
    await reconcile.on_create(await under_test.job(spec))
    savepoint = f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints/{under_test.name}/savepoint-9"
    storage = CheckpointStorage(savepoint)
    anothers = CheckpointMetadata("other", 9, "savepoint", int(time.time() * 1000), {}, NAMESPACE)
    write_metadata(storage, storage.root, anothers, None)
    # As a suspension with a savepoint leaves it (its driver gone).
    await under_test.kube.delete_pod(NAMESPACE, f"{under_test.name}-driver-1")
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, {"phase": "Suspended", "suspendedWith": savepoint}
    )
    suspended = {**spec, "state": "suspended"}
    await reconcile.on_change(await under_test.job(spec, 3), suspended)
    assert (
        await run_driver_pod(under_test.kube, f"{under_test.name}-driver-2", tmp_path / "pods", ThreadStage())
        == 2
    )
    await reconcile.observe(await under_test.job(spec, 3))
    status = under_test.status()
    assert status["failure"]["class"] == "trust"
    assert "is not signed" in status["failure"]["message"]
    assert _ready(status)["reason"] == "TrustFailure"
    await _not_relaunched(under_test, spec, 3)


async def test_a_failed_job_is_launched_again_by_a_new_generation_of_its_spec(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    broken = {**SPEC, "job": {"entrypoint": "tests.operator.unimportable_job:build"}}
    assert await _operate(under_test, broken, tmp_path / "pods", ThreadStage()) == [2]
    fixed = {
        **SPEC,
        "job": {"entrypoint": "examples.sums:build", "args": {"output": f"file://{tmp_path}/out"}},
    }
    await reconcile.on_change(await under_test.job(fixed, 2), broken)
    status = under_test.status()
    assert status["phase"] == "Deploying"
    assert "failure" not in status, "a new attempt"
    assert under_test.pod(1) is None, "the failed driver's pod is removed"
    assert under_test.pod(2) is not None
    assert _ready(status)["reason"] == "Deploying"
