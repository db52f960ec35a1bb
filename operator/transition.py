"""Checkpoint-stop-modify-restore, step by step (the plan: `upgrade_plan.py`).
Each step is written to `status.upgrade` before it is taken, so an operator
restarted mid-way resumes at the recorded step; the new driver is created only
once the old one is gone, under the launch number fixed in the plan, so there
are never two.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lockgate.operator.conditions import changing, stopped
from lockgate.operator.driver_pod import Launch, driver_pod
from lockgate.operator.errors import RetryLaterError
from lockgate.operator.job import Job
from lockgate.operator.owned import etcd_credentials_secret, owned_objects, snapshot_key_secret
from lockgate.operator.phase import JobPhase
from lockgate.operator.savepoint_history import completed, failed
from lockgate.operator.savepoints import ask_savepoint, record_savepoint
from lockgate.operator.spec import StreamingJobSpec
from lockgate.operator.status import Deployment
from lockgate.operator.upgrade_plan import Restore, Step, UpgradePlan
from lockgate.runtime.coordination.job_identity import new_password
from lockgate.runtime.keygroups import default_max_parallelism

log = logging.getLogger(__name__)


def max_parallelism(job: Job, spec: StreamingJobSpec) -> int:
    """Fixed at the first launch: key groups of written state never change. `spec`:
    the one being checked or launched."""
    return job.status.max_parallelism or spec.max_parallelism or default_max_parallelism(spec.replicas)


async def carry_out(job: Job, plan: UpgradePlan) -> None:
    """Take `plan` from its recorded step to its end."""
    if plan.suspend:
        phase = JobPhase.SUSPENDING
    else:
        phase = JobPhase.UPGRADING if job.status.launch else JobPhase.DEPLOYING
    if plan.started_at is None:  # kept across resumes: durations count the whole change
        plan = plan.at(plan.step, started_at=time.time())
    # A step retried (the driver pod still terminating) or resumed by a restarted
    # operator was told when it began: its Event is not posted again.
    resumed = recorded_plan(job)
    told = resumed.step if resumed is not None and resumed.launch == plan.launch else None
    message = f"{plan.reason}: {plan.step.value}, then launch {plan.launch}"
    conditions = changing(job.status.conditions, phase.value, message, job.generation)
    await job.record(upgrade=plan, phase=phase, conditions=conditions)
    if plan.step is Step.SAVEPOINT:
        if told is not Step.SAVEPOINT:
            job.inform("TakingSavepoint", f"{plan.reason}: savepoint {plan.request}, stopping the driver")
        plan = await _take_savepoint(job, plan)
    if plan.step is Step.STOPPING:
        launch = job.status.launch
        if launch and told is not Step.STOPPING:
            job.inform("StoppingDriver", f"{plan.reason}: stopping {job.names.driver_pod(launch)}")
        plan = await _stop_driver(job, plan)
    if plan.step is Step.STARTING:
        if told is not Step.STARTING:
            restores = plan.savepoint or ("no state" if plan.restore == "empty" else "the latest checkpoint")
            job.inform("LaunchingDriver", f"{plan.reason}: launch {plan.launch}, restoring {restores}")
        await _start_driver(job, plan)
    elif plan.step is Step.SUSPENDED:
        _observe_duration(job, plan)
        suspended_with = plan.savepoint or "latest"
        message = f"suspended with {suspended_with}"
        await record_stopped(job, JobPhase.SUSPENDED, message, upgrade=None, suspended_with=suspended_with)
        job.inform("Suspended", message)


async def record_stopped(job: Job, phase: JobPhase, message: str, /, **fields: Any) -> None:
    """`phase`, in which no driver runs and none is on its way (suspended, finished,
    failed), with `fields`; its reason in the conditions is the phase's name."""
    conditions = stopped(job.status.conditions, phase.value, message)
    await job.record(phase=phase, replicas=0, conditions=conditions, **fields)


def recorded_plan(job: Job) -> UpgradePlan | None:
    """The plan an earlier handler (or operator) recorded and did not finish."""
    return job.status.upgrade


def _observe_duration(job: Job, plan: UpgradePlan) -> None:
    """Counted before the step that clears `status.upgrade` is written."""
    started = plan.started_at if plan.started_at is not None else time.time()
    job.context.metrics.upgrade_took(job.names.qualified, plan.reason, time.time() - started)


def start_plan(job: Job, reason: str, savepoint: str | None = None) -> UpgradePlan:
    """Start a driver with nothing running to stop (a new job, a resumed one), from
    `savepoint` if one is named, else from the latest checkpoint."""
    restore: Restore = "latest" if savepoint is None else "savepoint"
    return UpgradePlan(Step.STARTING, reason, job.next_launch, restore, savepoint)


def import_plan(job: Job, path: str, step: Step, reason: str = "import") -> UpgradePlan:
    """Restore `path`, which the job's key did not sign (`spec.job.importUnsignedSavepoint`,
    or `spec.initialSavepointPath` at a new job's first launch)."""
    return UpgradePlan(
        step, reason, job.next_launch, "savepoint", path, generation=job.generation, imported=True
    )


def restart_plan(job: Job, reason: str) -> UpgradePlan:
    """Replace the driver, restoring the job's latest completed checkpoint."""
    return UpgradePlan(Step.STOPPING, reason, job.next_launch, "latest")


def retry_plan(job: Job, spec: StreamingJobSpec) -> UpgradePlan:
    """Launch a Failed job again with a new generation of its spec: from the latest
    checkpoint, or from empty state when its upgrade mode is stateless (no driver
    runs to take a savepoint)."""
    restore: Restore = "empty" if spec.upgrade_mode == "stateless" else "latest"
    return UpgradePlan(Step.STOPPING, "retry", job.next_launch, restore, generation=job.generation)


def upgrade_plan(job: Job, spec: StreamingJobSpec, reason: str, *, suspend: bool = False) -> UpgradePlan:
    """Apply a changed spec (or suspend) as the job's upgrade mode says."""
    launch, generation = job.next_launch, job.generation
    if spec.upgrade_mode == "savepoint":
        request = f"{reason}-g{generation}-l{launch}"
        return UpgradePlan(
            Step.SAVEPOINT, reason, launch, request=request, suspend=suspend, generation=generation
        )
    restore: Restore = "latest" if spec.upgrade_mode == "last-state" else "empty"
    return UpgradePlan(Step.STOPPING, reason, launch, restore, suspend=suspend, generation=generation)


async def _fall_back(job: Job, plan: UpgradePlan, reason: str, why: str) -> UpgradePlan:
    """No savepoint to carry state over: the latest completed checkpoint will."""
    fallback = plan.at(Step.STOPPING, restore="latest")
    job.warn(reason, f"{why}; restoring the latest checkpoint instead")
    await job.record(upgrade=fallback, message=f"{why}; restoring the latest checkpoint instead")
    return fallback


async def _take_savepoint(job: Job, plan: UpgradePlan) -> UpgradePlan:
    spec, etcd = job.applied_spec, job.context.etcd
    assert plan.request is not None, "a savepoint step names its request"
    # Resumed after the driver answered (and stopped): take that answer.
    result = await etcd.savepoint_result(job.keys, plan.request)
    running = await etcd.status(job.keys)
    if result is None and (running is None or running.state != "running"):
        return await _fall_back(job, plan, "SavepointSkipped", "the job is not running to take a savepoint")
    result = result or await ask_savepoint(job, plan.request, stop=True)
    if result is None:
        why = f"no savepoint within {spec.savepoints.timeout_s:g} s"
        await record_savepoint(job, failed(plan.reason, why, time.time(), plan.request))
        return await _fall_back(job, plan, "SavepointTimedOut", why)
    if result.status != "completed" or result.path is None:
        await record_savepoint(job, failed(plan.reason, str(result.error), time.time()))
        return await _fall_back(job, plan, "SavepointFailed", f"savepoint failed ({result.error})")
    last = job.status.last_savepoint
    if last is None or last.path != result.path:  # not if resumed after it
        await record_savepoint(job, completed(result.path, plan.reason, result.bytes, time.time()))
    after = plan.at(Step.STOPPING, restore="savepoint", savepoint=result.path)
    await job.record(upgrade=after)
    return after


async def _await_exit(job: Job, pod_name: str) -> None:
    """A driver stopped with a savepoint exits by itself, once it has recorded its
    outcome and let its sink's last commit finish; deleting its pod before that
    would cut the shutdown short and leave its `running` heartbeat behind."""
    kube, deadline = job.context.kube, time.monotonic() + job.context.driver_exit_timeout_s
    while (pod := await kube.pod(job.names.namespace, pod_name)) is not None:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        if time.monotonic() > deadline:
            log.warning(
                "job %s: driver %s has not exited after its savepoint; deleting it", job.keys.job, pod_name
            )
            return
        await asyncio.sleep(0.5)  # polling the API, as below


async def remove_driver(job: Job, launch: int, *, stopped_with_savepoint: bool) -> None:
    """Delete driver `launch`'s pod and wait until it is gone, its processes with it."""
    names, kube = job.names, job.context.kube
    pod_name = names.driver_pod(launch)
    if stopped_with_savepoint:
        await _await_exit(job, pod_name)
    await kube.delete_pod(names.namespace, pod_name)
    deadline = time.monotonic() + job.context.driver_exit_timeout_s
    while await kube.pod(names.namespace, pod_name) is not None:
        if time.monotonic() > deadline:
            raise RetryLaterError(f"driver pod {pod_name} is still terminating", delay_s=10)
        await asyncio.sleep(1)  # polling the API: pod deletion has no event we could await here


async def _stop_driver(job: Job, plan: UpgradePlan) -> UpgradePlan:
    launch = job.status.launch
    if launch:
        # A savepoint in the plan was taken with stop: the driver is on its way out.
        stopped = plan.restore == "savepoint" and not plan.imported
        await remove_driver(job, launch, stopped_with_savepoint=stopped)
    after = plan.at(Step.SUSPENDED if plan.suspend else Step.STARTING)
    await job.record(upgrade=after, replicas=0)
    return after


async def _new_etcd_password(job: Job, spec: StreamingJobSpec) -> None:
    """Each launch reaches etcd as the job's own user with a password new for it:
    drivers and tasks of earlier launches can no longer authenticate. The Secret
    comes first: a step retried after a crash between the two sets both again."""
    if job.context.cluster.etcd_user_of(job.names, spec) is None:
        return
    password = new_password()
    secret = etcd_credentials_secret(job.names, password)
    job.adopt(secret)
    await job.context.kube.apply(secret)
    await job.context.etcd.grant_identity(job.keys, password)


async def _start_driver(job: Job, plan: UpgradePlan) -> None:
    spec, names, kube = job.applied_spec, job.names, job.context.kube
    launch = Launch(
        plan.launch, max_parallelism(job, spec), plan.restore, plan.savepoint, import_unsigned=plan.imported
    )
    pod = driver_pod(names, spec, launch, job.context.cluster)
    objects = owned_objects(
        names,
        job.applied_raw_spec,
        job.context.cluster,
        own_service_account=spec.service_account_name is None,
    )
    key = snapshot_key_secret(names)
    for obj in [key, *objects, pod]:
        job.adopt(obj)
    await kube.create(key)  # False from the second launch on: the job keeps its first key
    for obj in objects:
        await kube.apply(obj)
    if await kube.pod(names.namespace, pod["metadata"]["name"]) is None:
        # Not for a resumed step whose pod exists: it runs with the password it has.
        await _new_etcd_password(job, spec)
    await kube.create(pod)  # False when a resumed step created it already
    _observe_duration(job, plan)
    await job.record(
        upgrade=None,
        phase=JobPhase.DEPLOYING,
        launch=launch.number,
        max_parallelism=launch.max_parallelism,
        replicas=0,  # until the new driver says it runs: the old one is gone
        selector=names.executor_selector,
        job_id=names.qualified,
        # The generation this launch carries out: the job's own only once accepted, else
        # the one accepted before it (launched while the new one is refused or not checked yet).
        observed_generation=job.status.accepted_generation,
        deployment=Deployment(launch.number, launch.restore, launch.savepoint),
        suspended_with=None,
        failure=None,  # a new attempt
        conditions=changing(
            job.status.conditions,
            JobPhase.DEPLOYING.value,
            f"driver {pod['metadata']['name']} restoring {launch.savepoint or launch.restore}",
            job.generation,
        ),
    )
    log.info("job %s: launch %s from %s", job.keys.job, launch.number, launch.savepoint or launch.restore)
