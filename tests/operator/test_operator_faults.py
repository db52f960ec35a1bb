"""What an adversarial try of the operator's savepoint history, initial savepoint
and refused specs broke — each test failed before its fix. Run through the
operator's logic on a real etcd, real files and an in-memory Kubernetes API."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lockgate.operator import reconcile
from lockgate.operator.conditions import iso_time
from lockgate.operator.errors import RefusedError
from lockgate.operator.job_policy import JobPolicy
from lockgate.operator.metrics import OperatorMetrics
from lockgate.operator.phase import JobPhase
from lockgate.operator.savepoint_history import SavepointEntry
from lockgate.operator.savepoints import MAX_ENTRIES
from lockgate.operator.status import StatusUnreadableError, StreamingJobStatus
from lockgate.operator.transition import restart_plan, start_plan
from lockgate.operator.upgrade_plan import Step
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import SavepointResult, encode

from tests.operator.cluster_helpers import NAMESPACE, SPEC, StandInDriver, driver_args, write_savepoint_files
from tests.operator.job_under_test import JobUnderTest


def _restores(pod: dict[str, Any] | None) -> str:
    assert pod is not None
    args = driver_args(pod)
    return args[args.index("--from-savepoint") + 1] if "--from-savepoint" in args else "latest"


def _savepoint_dir(under_test: JobUnderTest, tmp_path: Path, namespace: str = NAMESPACE) -> str:
    return f"file://{tmp_path}/checkpoints/{namespace}/_savepoints/{under_test.name}"


async def _periodic_due(under_test: JobUnderTest, ago_s: float) -> None:
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, {"nextPeriodicSavepoint": iso_time(time.time() - ago_s)}
    )


async def test_a_spec_refused_by_policy_is_not_what_restarts_and_savepoints_go_by(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """Failed before: a spec that parses but is refused (a hostPath volume, another
    namespace's savepoint directory) was taken as the spec in force while refused:
    periodic savepoints went to the other namespace's directory, and a lost driver
    was relaunched with the hostPath volume."""
    spec = {**SPEC, "savepoints": {"interval": "1h"}}
    await under_test.running(spec)
    theirs = f"file://{tmp_path}/checkpoints/other-ns/_savepoints/victim"
    refused = {
        **spec,
        "savepoints": {"interval": "1h", "dir": theirs},
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
    }
    with pytest.raises(RefusedError):
        await reconcile.on_change(await under_test.job(refused, 2), spec)
    driver = StandInDriver(under_test.kube, etcd, under_test.keys)
    async with driver.running():
        await reconcile.observe(await under_test.job(refused, 2))
        await _periodic_due(under_test, ago_s=1)
        await reconcile.observe(await under_test.job(refused, 2))
    assert [request.dir for _, request in driver.requests] == [None], "the accepted spec's directory"
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Failed")
    await reconcile.observe(await under_test.job(refused, 2))
    await under_test.kube.patch_status(NAMESPACE, under_test.name, {"restartAt": time.time() - 1})
    await reconcile.observe(await under_test.job(refused, 2))
    pod = under_test.pod(2)
    assert pod is not None, "the lost driver is relaunched"
    assert "hostPath" not in json.dumps(pod)
    args = driver_args(pod)
    assert args[args.index("--savepoint-dir") + 1] == _savepoint_dir(under_test, tmp_path)
    assert json.loads(under_test.status()["acceptedSpec"]) == spec


async def test_a_full_history_still_takes_a_new_savepoint_in_one_write(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """Failed before: the new entry was written before the history was trimmed, so
    with historySize 100 the API server (maxItems 100) refused every write, and
    no savepoint (a periodic one here, an upgrade's alike) could be recorded."""
    spec = {**SPEC, "savepoints": {"interval": "1h", "historySize": 100}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    history = [
        SavepointEntry(
            "periodic", iso_time(time.time() - 60 * (i + 1)), "completed", path=f"{directory}/savepoint-p-{i}"
        )
        for i in range(100)
    ]
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(history)).for_storage()
    )
    driver = StandInDriver(under_test.kube, etcd, under_test.keys, savepoint_dir=directory)
    async with driver.running():
        await _periodic_due(under_test, ago_s=1)
        await reconcile.observe(await under_test.job(spec))
    written = [patch["savepoints"] for patch in under_test.kube.status_patches if "savepoints" in patch]
    assert written, "the savepoint is recorded"
    assert max(len(savepoints) for savepoints in written) <= MAX_ENTRIES
    assert under_test.status()["savepoints"][0]["reason"] == "periodic"
    assert under_test.status()["savepoints"][0]["path"].startswith(f"{directory}/savepoint-periodic-")


@pytest.mark.parametrize("first", ["created suspended", "created refused"])
async def test_the_first_launch_restores_the_initial_savepoint_however_late_it_comes(
    under_test: JobUnderTest, tmp_path: Path, first: str
) -> None:
    """Failed before: a job created suspended, or with a refused spec, started from
    empty state when it was resumed or fixed."""
    initial = f"file://{tmp_path}/checkpoints/{NAMESPACE}/imports/savepoint-x"
    spec = {**SPEC, "initialSavepointPath": initial}
    if first == "created suspended":
        created = {**spec, "state": "suspended"}
        await reconcile.on_create(await under_test.job(created))
        assert under_test.status()["phase"] == "Suspended"
    else:
        created = {**spec, "initialSavepointPath": f"file://{tmp_path}/checkpoints/other-ns/savepoint-x"}
        with pytest.raises(RefusedError):
            await reconcile.on_create(await under_test.job(created))
    await reconcile.on_change(await under_test.job(spec, 2), created)
    assert _restores(under_test.pod(1)) == initial
    assert "--import-unsigned-savepoint" in driver_args(under_test.pod(1) or {})


@pytest.mark.parametrize(
    "times",
    [
        ["2026-11-26T08:00:00.123Z", "2026-11-26T08:00:00+00:00"],
        ["yesterday", ""],
    ],
)
async def test_times_in_any_shape_do_not_stop_observations(
    under_test: JobUnderTest, etcd: Etcd, times: list[str]
) -> None:
    """Failed before: a time with a fraction or an offset (both RFC 3339, as the CRD
    takes them) or an unreadable one raised at every observation, and with it
    retention and periodic savepoints stopped for good."""
    spec = {**SPEC, "savepoints": {"interval": "1h", "historyMaxAge": "1h"}}
    await under_test.running(spec)
    stored = [
        {"path": f"file:///sp/savepoint-{i}", "reason": "upgrade", "time": t, "status": "completed"}
        for i, t in enumerate(times)
    ]
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, {"savepoints": stored, "nextPeriodicSavepoint": times[0]}
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.observe(await under_test.job(spec))
    status = under_test.status()
    assert status["phase"] == "Running"
    assert status["nextPeriodicSavepoint"] > iso_time(time.time()), "an unreadable due time is set anew"


async def test_a_status_the_operator_did_not_write_is_named_not_acted_on(under_test: JobUnderTest) -> None:
    """What the CRD's schema keeps out of a cluster's status (a savepoint entry that is
    no object): nothing is done by it, and what is wrong is named."""
    await under_test.running()
    await under_test.kube.patch_status(NAMESPACE, under_test.name, {"savepoints": ["not an entry"]})
    with pytest.raises(
        StatusUnreadableError, match=r"status\.savepoints\.0: .*kubectl patch --subresource=status"
    ):
        await under_test.job()


async def test_a_savepoint_the_operator_cannot_see_is_not_reported_disposed_of(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """Failed before: with file:// storage the operator does not mount, nothing was
    deleted and yet a SavepointDisposed Event said it was."""
    spec = {**SPEC, "savepoints": {"historySize": 1}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    newest, unseen = f"{directory}/savepoint-upgrade-2-0a1b2c3d", f"{directory}/savepoint-upgrade-1-0a1b2c3d"
    write_savepoint_files(newest)
    history = [
        SavepointEntry("upgrade", iso_time(time.time() - age), "completed", path=p)
        for age, p in ((1, newest), (60, unseen))
    ]
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(history)).for_storage()
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.observe(await under_test.job(spec))
    assert [entry["path"] for entry in under_test.status()["savepoints"]] == [newest]
    assert "SavepointDisposed" not in under_test.events.reasons()
    (message,) = [m for _, reason, m in under_test.events.events if reason == "SavepointNotFound"]
    assert unseen in message
    assert "not found" in message


async def test_a_periodic_savepoint_answered_after_its_timeout_is_recorded_and_kept_by_the_history(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """Failed before: the late savepoint stayed `failed` in the history and its
    files were never recorded, so never disposed of: slow storage leaked one
    savepoint per interval."""
    spec = {**SPEC, "savepoints": {"interval": "1h", "historySize": 1, "timeout": "200ms"}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    slow = StandInDriver(under_test.kube, etcd, under_test.keys, savepoint_dir=directory, answer=False)
    async with slow.running():
        await _periodic_due(under_test, ago_s=30)
        await reconcile.observe(await under_test.job(spec))
        ((request_id, request),) = slow.requests
        (timed_out,) = under_test.status()["savepoints"]
        assert (timed_out["status"], timed_out["request"]) == ("failed", request_id)
        late = await slow.complete(request_id, request)  # after the operator stopped waiting
        await reconcile.observe(await under_test.job(spec))
        (recorded,) = under_test.status()["savepoints"]
        assert (recorded["status"], recorded["path"]) == ("completed", late)
    fast = StandInDriver(under_test.kube, etcd, under_test.keys, savepoint_dir=directory)
    async with fast.running():
        await _periodic_due(under_test, ago_s=20)
        await reconcile.observe(await under_test.job(spec))
    assert [entry["path"] for entry in under_test.status()["savepoints"]] != [late]
    assert not Path(late.removeprefix("file://")).exists(), "the late one is disposed of in its turn"


async def test_a_restarted_operator_exports_the_phase_of_a_job_stuck_deploying(
    under_test: JobUnderTest,
) -> None:
    """Failed before: the phase gauge was set only when a phase was written, so after
    an operator restart a job stuck Deploying (its pod never runs) had none, and
    LockgateJobStuckProgressing could not fire."""
    await reconcile.on_create(await under_test.job(SPEC))
    under_test.context = dataclasses.replace(under_test.context, metrics=OperatorMetrics())  # a new process
    await reconcile.observe(await under_test.job(SPEC))
    labels = {"job_namespace": NAMESPACE, "job_id": under_test.name, "phase": "Deploying"}
    assert under_test.context.metrics.registry.get_sample_value("lockgate_job_phase", labels) == 1


async def test_a_change_event_names_only_what_changed_since_the_last_accepted_spec(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """Failed before: changes applied without a restart were named again in every
    later SpecChanged."""
    await under_test.running()
    second = {**SPEC, "savepoints": {"triggerNonce": 1}}
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.on_change(await under_test.job(second, 2), SPEC)
        third = {**second, "restartNonce": 1}
        await reconcile.on_change(await under_test.job(third, 3), second)
    changes = [m for _, reason, m in under_test.events.events if reason == "SpecChanged"]
    assert changes == ["generation 2 changes savepoints", "generation 3 changes restartNonce"]


async def test_a_step_resumed_before_the_new_generation_is_checked_launches_the_accepted_spec(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """From a review: an upgrade to generation 2 waits (its old driver is slow to
    go); generation 3 asks for a hostPath volume; the operator resumes 2's step
    before it checks 3. Failed before: the driver was launched with 3's volume."""
    await under_test.running()
    scaled = {**SPEC, "replicas": 4}
    job = await under_test.accepted(scaled, generation=2)
    plan = restart_plan(job, "upgrade").at(Step.STARTING)
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(upgrade=plan).for_storage()
    )
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Succeeded")
    hostile = {**scaled, "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
    with pytest.raises(RefusedError):
        await reconcile.on_change(await under_test.job(hostile, 3), scaled)
    pod = under_test.pod(2)
    assert pod is not None
    assert "hostPath" not in json.dumps(pod)
    args = driver_args(pod)
    assert args[args.index("--parallelism") + 1] == "4", "generation 2's spec, the one accepted"
    assert json.loads(under_test.status()["acceptedSpec"]) == scaled
    assert under_test.status()["observedGeneration"] == 2, "generation 3 is not what runs"


async def test_deleting_a_job_whose_new_spec_is_refused_deletes_by_the_accepted_spec(
    under_test: JobUnderTest, tmp_path: Path
) -> None:
    """From a review: `deletion.checkpoints: delete` with a refused storage in another
    namespace made the operator delete that namespace's directory."""
    spec = {**SPEC, "deletion": {"checkpoints": "delete"}}
    await under_test.running(spec)
    theirs = tmp_path / "checkpoints" / "other-ns"
    directory = theirs / NAMESPACE / under_test.name  # where that storage keeps this job's checkpoints
    directory.mkdir(parents=True)
    (directory / "state").write_text("another team's")
    refused = {**spec, "checkpointing": {"storage": f"file://{theirs}"}}
    with pytest.raises(RefusedError):
        await reconcile.on_change(await under_test.job(refused, 2), spec)
    await reconcile.on_delete(await under_test.job(refused, 2))
    assert (directory / "state").read_text() == "another team's"


async def test_a_spec_only_a_launch_would_refuse_is_refused_before_the_running_driver_stops(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """From a review: executor memory below Spark's minimum passed the check, the
    savepoint was taken and the old driver stopped, and then every launch failed
    — and a fixed spec was never taken, the failing step being resumed first."""
    await under_test.running()
    small = {**SPEC, "executor": {"resources": {"requests": {"memory": "256Mi"}}}}
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running() as driver:
        with pytest.raises(RefusedError, match="memory"):
            await reconcile.on_change(await under_test.job(small, 2), SPEC)
    assert driver.requests == [], "no savepoint, no stop"
    assert under_test.pod(1) is not None
    assert "upgrade" not in under_test.status()


async def test_a_first_launch_an_earlier_operator_recorded_is_finished(under_test: JobUnderTest) -> None:
    """From a review: a status written by the operator before acceptance was
    recorded (a recorded first launch, nothing accepted) raised at every retry."""
    job = await under_test.job()
    plan = start_plan(job, "created")
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(upgrade=plan, phase=JobPhase.DEPLOYING).for_storage()
    )
    await reconcile.on_create(await under_test.job())
    assert under_test.pod(1) is not None
    assert under_test.status()["launch"] == 1
    assert under_test.pod(2) is None, "launched once"


async def test_an_entry_awaiting_its_answer_stays_until_the_answer_and_is_recorded_once(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """From a review: a timed-out entry fell out of a small history before its late
    answer came (the savepoint leaked), and an operator that asked the same request
    twice recorded the answer twice."""
    spec = {**SPEC, "savepoints": {"historySize": 1}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    late = f"{directory}/savepoint-periodic-7-0a1b2c3d"
    write_savepoint_files(late)
    newer_path = f"{directory}/savepoint-periodic-8-0a1b2c3d"
    write_savepoint_files(newer_path)
    newer = SavepointEntry("periodic", iso_time(time.time() - 5), "completed", path=newer_path)
    waiting = SavepointEntry(
        "periodic", iso_time(time.time() - 60), "failed", error="timed out", request="periodic-7"
    )
    history = [newer, waiting, waiting]  # asked twice
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(history)).for_storage()
    )
    await etcd.put(under_test.keys.savepoint_request("periodic-7"), b"{}")  # still queued
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.observe(await under_test.job(spec))
        assert len(under_test.status()["savepoints"]) == 3, "kept beyond historySize while awaited"
        await etcd.delete(under_test.keys.savepoint_request("periodic-7"))
        answer = SavepointResult("completed", late, bytes=1000)
        await etcd.put(under_test.keys.savepoint_result("periodic-7"), encode(answer))
        await reconcile.observe(await under_test.job(spec))
    answered = [m for _, reason, m in under_test.events.events if reason == "Savepoint" and late in m]
    assert len(answered) == 1, "recorded once"
    assert [entry["path"] for entry in under_test.status()["savepoints"]] == [newer_path]
    assert not Path(late.removeprefix("file://")).exists(), "then disposed of in its turn, once"
    assert Path(newer_path.removeprefix("file://")).exists()


async def test_an_answer_that_never_comes_is_given_up_on(under_test: JobUnderTest, etcd: Etcd) -> None:
    """From a review: a driver stopped while it took a savepoint leaves it `pending`
    for good; the entry was looked up at every observation forever."""
    await under_test.running()
    stale = SavepointEntry(
        "upgrade", iso_time(time.time() - 2 * 3600), "failed", error="timed out", request="up-1"
    )
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=(stale,)).for_storage()
    )
    await etcd.put(
        under_test.keys.savepoint_result("up-1"), encode(SavepointResult("pending", "file:///sp/x"))
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.observe(await under_test.job())
    (entry,) = under_test.status()["savepoints"]
    assert "request" not in entry


async def test_a_history_past_the_crds_limit_drops_its_oldest_saying_so(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    """Entries kept whatever the history's size (those awaiting an answer) cannot
    take it past the CRD's 100: the oldest leave, named in a Warning, files kept."""
    await under_test.running()
    waiting = [
        SavepointEntry(
            "periodic", iso_time(time.time() - i), "failed", error="timed out", request=f"periodic-{i}"
        )
        for i in range(MAX_ENTRIES + 5)
    ]
    for entry in waiting:
        assert entry.request is not None
        await etcd.put(under_test.keys.savepoint_request(entry.request), b"{}")  # still queued
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(waiting)).for_storage()
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await reconcile.observe(await under_test.job())
    kept = under_test.status()["savepoints"]
    assert [entry["request"] for entry in kept] == [f"periodic-{i}" for i in range(MAX_ENTRIES)]
    (message,) = [m for _, reason, m in under_test.events.events if reason == "SavepointHistoryFull"]
    assert message.endswith("periodic, periodic, periodic, periodic, periodic")


async def _lose_driver(under_test: JobUnderTest, spec: dict[str, Any]) -> None:
    """Driver 1 fails, and the restart strategy's delay has passed."""
    await under_test.kube.set_pod_phase(f"{under_test.name}-driver-1", "Failed")
    await reconcile.observe(await under_test.job(spec))
    await under_test.kube.patch_status(NAMESPACE, under_test.name, {"restartAt": time.time() - 1})


def _unmark_uploader(under_test: JobUnderTest) -> None:
    under_test.kube.service_accounts[NAMESPACE, "uploader"] = {}


def _unlabel_namespace(under_test: JobUnderTest) -> None:
    under_test.kube.namespaces[NAMESPACE] = {}


def _drop_privileged_switch(under_test: JobUnderTest) -> None:
    """The operator restarted without --allow-privileged-pods."""
    under_test.context = dataclasses.replace(under_test.context, policy=JobPolicy())


@pytest.mark.parametrize(
    ("spec", "since", "reason", "why"),
    [
        (
            {**SPEC, "serviceAccountName": "uploader"},
            _unmark_uploader,
            "InvalidSpec",
            "spec.serviceAccountName 'uploader' is not marked for StreamingJobs",
        ),
        (
            SPEC,
            _unlabel_namespace,
            "NamespaceNotRestricted",
            f'namespace {NAMESPACE} does not enforce Pod Security "restricted"',
        ),
        (
            {**SPEC, "volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
            _drop_privileged_switch,
            "InvalidSpec",
            "spec.volumes[0] (host) is of kind hostPath",
        ),
    ],
)
async def test_a_lost_driver_is_not_relaunched_with_a_spec_that_no_longer_passes(
    under_test: JobUnderTest,
    spec: dict[str, Any],
    since: Callable[[JobUnderTest], None],
    reason: str,
    why: str,
) -> None:
    """Failed before: the lost driver's accepted spec was relaunched as it was,
    whatever had changed since its acceptance: the account's mark, the namespace's
    label, the operator's switches."""
    under_test.kube.service_accounts[NAMESPACE, "uploader"] = {"lockgate.dev/streaming-jobs": "allowed"}
    if since is _drop_privileged_switch:  # accepted under it
        policy = JobPolicy(allow_privileged_pods=True)
        under_test.context = dataclasses.replace(under_test.context, policy=policy)
    await under_test.running(spec)
    since(under_test)
    await _lose_driver(under_test, spec)
    for _ in range(2):  # every observation checks again, and says it once
        await reconcile.observe(await under_test.job(spec))
    assert under_test.pod(2) is None, "relaunched with a spec that no longer passes"
    status = under_test.status()
    assert status["phase"] == "Restarting"
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert degraded["message"].startswith(
        "driver not relaunched: the spec it ran (generation 1) is refused now: "
    )
    assert why in degraded["message"]
    warnings = [(kind, message) for kind, r, message in under_test.events.events if r == reason]
    assert warnings == [("Warning", degraded["message"])]


async def test_a_relaunch_refused_goes_ahead_once_the_spec_passes_again(under_test: JobUnderTest) -> None:
    await under_test.running(SPEC)
    _unlabel_namespace(under_test)
    await _lose_driver(under_test, SPEC)
    await reconcile.observe(await under_test.job(SPEC))
    assert under_test.pod(2) is None

    under_test.kube.namespaces[NAMESPACE] = {"pod-security.kubernetes.io/enforce": "restricted"}
    await reconcile.observe(await under_test.job(SPEC))
    assert under_test.pod(2) is not None, "relaunched once the namespace is labelled"
    degraded = next(c for c in under_test.status()["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "SpecValid")
    assert "message" not in under_test.status() or "not relaunched" not in under_test.status()["message"]


async def test_the_unrestricted_namespaces_switch_runs_a_job_in_an_unlabelled_namespace(
    under_test: JobUnderTest,
) -> None:
    _unlabel_namespace(under_test)
    with pytest.raises(RefusedError) as refusal:
        await reconcile.on_create(await under_test.job(SPEC))
    assert refusal.value.recheck_s == under_test.context.namespace_recheck_s, "checked again later"
    assert under_test.pod(1) is None
    policy = JobPolicy(allow_unrestricted_namespaces=True)
    under_test.context = dataclasses.replace(under_test.context, policy=policy)
    await reconcile.on_create(await under_test.job(SPEC))
    assert under_test.pod(1) is not None
