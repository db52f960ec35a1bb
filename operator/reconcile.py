"""What the operator does for each event of a StreamingJob — plain functions the
kopf handlers call and the tests call directly."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from lockgate.operator.autoscaler_status import desired_parallelism, observe_autoscaler
from lockgate.operator.conditions import (
    MESSAGE_LIMIT,
    changing,
    failed_reason,
    iso_time,
    refused,
    runs,
    set_condition,
    stopped,
)
from lockgate.operator.driver_pod import storage_layout
from lockgate.operator.errors import RefusedError, RetryLaterError
from lockgate.operator.job import Job
from lockgate.operator.job_policy import NamespaceNotRestrictedError
from lockgate.operator.launch_check import check_launch
from lockgate.operator.phase import JobPhase
from lockgate.operator.rescale_in_place import rescale_in_place
from lockgate.operator.savepoints import (
    ask_savepoint,
    keep_savepoint_history,
    periodic_savepoint,
    record_outcome,
)
from lockgate.operator.spec import SpecError, StreamingJobSpec, parse_spec
from lockgate.operator.status import CheckpointSummary, Failure
from lockgate.operator.transition import (
    carry_out,
    import_plan,
    max_parallelism,
    record_stopped,
    recorded_plan,
    remove_driver,
    restart_plan,
    retry_plan,
    start_plan,
    upgrade_plan,
)
from lockgate.operator.upgrade_plan import Step
from lockgate.runtime.coordination.records import JobStatus
from lockgate.runtime.engine.restart import RestartHistory, decide
from lockgate.runtime.failure_class import FailureClass, bounded
from lockgate.runtime.snapshot.storage import CheckpointStorage

# A deleted job's checkpoints the storage refused to delete: tried again this much later.
CHECKPOINT_DELETION_RETRY_S = 60.0


async def checked_spec(job: Job) -> StreamingJobSpec:
    """The job's spec once checked against the model and the operator's policy, and
    recorded as accepted; a refusal sets Degraded and raises RefusedError."""
    try:
        spec = job.spec
        recorded = job.status.max_parallelism
        if recorded and spec.max_parallelism not in (None, recorded):
            raise SpecError(
                f"spec.maxParallelism cannot change from {recorded} to {spec.max_parallelism}: "
                "the job's state is split into that many key groups"
            )
        await check_launch(job, spec)
    except SpecError as error:
        # The last good spec keeps running; the conditions and an Event say why the new one is not.
        await _refuse(job, error, f"spec of generation {job.generation} not applied: {error}")
        # Labelling the namespace lets a job refused for it start without a change of the job.
        namespace = isinstance(error, NamespaceNotRestrictedError)
        recheck = job.context.namespace_recheck_s if namespace else None
        raise RefusedError(str(error), recheck) from error
    accepted: dict[str, Any] = {
        "accepted_spec": json.dumps(job.raw_spec, sort_keys=True),
        "accepted_generation": job.generation,
    }
    if job.refused is not None:
        accepted["conditions"] = set_condition(
            job.status.conditions, "Degraded", true=False, reason="SpecValid"
        )
        accepted["message"] = None
    await job.record(**accepted)
    return spec


async def _refuse(job: Job, error: SpecError, message: str) -> None:
    """Degraded, with the reason for `error`, and a Warning Event, once per refusal
    (a job checked again and refused alike is not announced again)."""
    reason = "NamespaceNotRestricted" if isinstance(error, NamespaceNotRestrictedError) else "InvalidSpec"
    if job.refused == message:
        return
    conditions = refused(job.status.conditions, message, job.generation, reason)
    await job.record(conditions=conditions, message=message)
    job.warn(reason, message)


async def _checked_then_recorded(job: Job) -> StreamingJobSpec:
    """Check the job's generation, then carry out a step an earlier handler (or
    operator) recorded and did not finish — by the spec accepted now: the new one
    if it passed, else the one before it — and only then raise a refusal. Checking
    first matters: a step that cannot finish (its pod refused) must not keep a
    fixed spec from being taken."""
    spec, refusal = None, None
    try:
        spec = await checked_spec(job)
    except RefusedError as error:
        refusal = error
    recorded = recorded_plan(job)
    if recorded is not None:
        await carry_out(job, recorded)
    if refusal is not None:
        raise refusal
    assert spec is not None, "a spec not refused was checked"
    return spec


async def on_create(job: Job) -> None:
    spec = await _checked_then_recorded(job)
    if not job.status.launch:  # else a recorded first launch was just finished
        await _first_launch(job, spec, "created")


async def _first_launch(job: Job, spec: StreamingJobSpec, reason: str) -> None:
    """A job none of whose drivers ran yet (new, created suspended, or created with a
    spec that was refused): suspended, or started from its initial savepoint, the
    savepoint it imports, or empty state."""
    if spec.state == "suspended":
        if job.phase is not JobPhase.SUSPENDED:
            await record_stopped(
                job, JobPhase.SUSPENDED, "created suspended", max_parallelism=max_parallelism(job, spec)
            )
            job.inform("Suspended", "created suspended")
    elif spec.initial_savepoint_path is not None:
        await carry_out(
            job, import_plan(job, spec.initial_savepoint_path, Step.STARTING, "initial savepoint")
        )
    elif spec.job.import_unsigned_savepoint is not None:
        await carry_out(job, import_plan(job, spec.job.import_unsigned_savepoint, Step.STARTING))
    else:
        await carry_out(job, start_plan(job, reason))


def _needs_restart(old: StreamingJobSpec, new: StreamingJobSpec) -> bool:
    """Whether the running driver must be replaced to apply `new`."""
    imported = new.job.import_unsigned_savepoint
    applied_live = old.model_copy(
        update={
            "savepoints": new.savepoints,
            "upgrade_mode": new.upgrade_mode,
            "state": new.state,
            "restart_nonce": new.restart_nonce,
            "initial_savepoint_path": new.initial_savepoint_path,  # a first launch's only
            # Read at a launch; a new value is carried out by on_change, a removed one needs nothing.
            "job": old.job.model_copy(update={"import_unsigned_savepoint": imported}),
        }
    )
    return applied_live != new


def _parsed(spec: dict[str, Any]) -> StreamingJobSpec | None:
    try:
        return parse_spec(spec)
    except SpecError:
        return None  # a spec that never ran: anything new needs a (re)start


async def on_change(job: Job, old_spec: dict[str, Any]) -> None:
    """A spec change: suspend, resume, upgrade, restart, savepoint — or nothing to restart."""
    before = job.status.accepted_raw_spec  # the spec in force until this change
    recorded = recorded_plan(job)
    new = await _checked_then_recorded(job)
    if recorded is not None and recorded.generation == job.generation:  # that was this very change
        await job.record(observed_generation=job.generation)
        return
    old = _parsed(old_spec)
    # Compared with the spec in force, not with the last spec seen: that one may have
    # been refused, and undoing a refused change must restart nothing. A step resumed
    # just now launched the driver by the spec accepted now: nothing more to apply.
    running = new if recorded is not None else (_parsed(before) if before is not None else old)
    _announce_change(job, before if before is not None else old_spec)
    if not job.status.launch:
        await _first_launch(job, new, "resume" if job.phase is JobPhase.SUSPENDED else "created")
    elif new.state == "suspended":
        if job.phase is not JobPhase.SUSPENDED:
            await carry_out(job, upgrade_plan(job, new, "suspend", suspend=True))
    elif job.phase is JobPhase.SUSPENDED:
        suspended_with = job.status.suspended_with
        savepoint = None if suspended_with in (None, "latest") else str(suspended_with)
        await carry_out(job, start_plan(job, "resume", savepoint))
    else:
        await _change_running(job, running, new)
        if old is not None and new.savepoints.trigger_nonce not in (None, old.savepoints.trigger_nonce):
            await savepoint_now(job)
    # The change is carried out (or needed no driver to be replaced).
    await job.record(observed_generation=job.generation)


async def _change_running(job: Job, running: StreamingJobSpec | None, new: StreamingJobSpec) -> None:
    """A change of a job that runs (or failed): an import, a new attempt, a rescale
    by the running driver, an upgrade or a restart — or nothing to replace."""
    imported = new.job.import_unsigned_savepoint
    if imported is not None and (running is None or running.job.import_unsigned_savepoint != imported):
        await carry_out(job, import_plan(job, imported, Step.STOPPING))
    elif job.phase is JobPhase.FAILED:  # a new generation is a new attempt
        await carry_out(job, retry_plan(job, new))
    elif (
        running is not None
        and job.phase is JobPhase.RUNNING
        and running.replicas != new.replicas
        and not _needs_restart(running.model_copy(update={"replicas": new.replicas}), new)
    ):
        if not await rescale_in_place(job, new):
            await carry_out(job, upgrade_plan(job, new, "upgrade"))
    elif running is None or _needs_restart(running, new):
        await carry_out(job, upgrade_plan(job, new, "upgrade"))
    elif new.restart_nonce != running.restart_nonce:
        await carry_out(job, restart_plan(job, "restart"))


def _announce_change(job: Job, running: dict[str, Any]) -> None:
    """A `SpecChanged` Event naming the fields that differ from the spec the driver runs."""
    new = job.raw_spec
    fields = sorted(name for name in running.keys() | new.keys() if running.get(name) != new.get(name))
    if fields:
        job.inform("SpecChanged", f"generation {job.generation} changes {', '.join(fields)}")


async def savepoint_now(job: Job) -> None:
    """A savepoint without stopping (savepoints.triggerNonce changed)."""
    nonce = job.spec.savepoints.trigger_nonce
    request = f"nonce-{nonce}"
    result = await ask_savepoint(job, request, stop=False)
    if result is None:
        raise RetryLaterError(f"no savepoint for trigger nonce {nonce} yet", delay_s=30)
    await record_outcome(job, f"trigger nonce {nonce}", request, result)


async def on_delete(job: Job) -> None:
    """Finalizer: an optional final savepoint, the driver (its executors go with it),
    the job's etcd keys, and its checkpoint files if the spec says so."""
    # The spec in force: a refused one (another namespace's storage, say) is not
    # what decides which files the operator deletes with its credentials.
    spec = _applied(job)  # None: no spec was ever accepted: nothing to save, keep the files
    launch = job.status.launch
    if launch:
        saved = spec is not None and spec.deletion.savepoint and await _final_savepoint(job, launch)
        # Gone before its keys are: a driver still shutting down would write its status again.
        await remove_driver(job, launch, stopped_with_savepoint=saved)
    await job.context.etcd.forget(job.keys)
    if job.context.cluster.etcd_job_users:
        await job.context.etcd.revoke_identity(job.keys)
    if spec is not None and spec.deletion.checkpoints == "delete":
        storage = storage_layout(job.names, spec, job.context.cluster)
        await _delete_checkpoints_or_say_why(job, storage.checkpoints)
    job.context.metrics.job_phase(job.names.qualified, None)


async def _delete_checkpoints_or_say_why(job: Job, storage_url: str) -> None:
    """The job's checkpoint directory deleted; if the storage refuses (the operator has
    no credentials for it, say), a Warning on the job says why, and the job, its
    finalizer on, stays until a later try succeeds."""
    try:
        await asyncio.to_thread(_delete_checkpoints, storage_url, job.names.name)
    except Exception as error:  # any storage error: told, and tried again
        why = f"{type(error).__name__}: {error}"[:300]
        job.warn(
            "CheckpointDeletionFailed",
            f"{storage_url}/{job.names.name} not deleted, {why}; the StreamingJob stays until it is "
            f"(tried again in {CHECKPOINT_DELETION_RETRY_S:.0f} s): give the operator credentials "
            "for the storage, or remove its finalizer to keep the files",
        )
        raise RetryLaterError(
            f"checkpoints not deleted: {why}", delay_s=CHECKPOINT_DELETION_RETRY_S
        ) from error


async def _final_savepoint(job: Job, launch: int) -> bool:
    """Whether the driver stopped with a final savepoint."""
    running = await job.context.etcd.status(job.keys)
    if running is None or running.state != "running":
        job.warn("SavepointSkipped", "deleted while not running: no final savepoint")
        return False
    result = await ask_savepoint(job, f"delete-l{launch}", stop=True)
    if result is None:
        job.warn("SavepointTimedOut", "no final savepoint; deleting anyway")
        return False
    await record_outcome(job, "deletion", f"delete-l{launch}", result)
    return result.status == "completed" and result.path is not None


def _delete_checkpoints(storage_url: str, job_id: str) -> None:
    storage = CheckpointStorage(storage_url)
    storage.delete(storage.job_dir(job_id), recursive=True)  # nothing when there is nothing


async def observe(job: Job) -> None:
    """Status from the driver pod and etcd; a lost driver restarted by the job's strategy."""
    if job.phase is not None:  # after an operator restart too: alerts read it from the first observation
        job.context.metrics.job_phase(job.names.qualified, job.phase)
    if job.status.upgrade is not None or job.phase in (
        None,
        JobPhase.SUSPENDED,
        JobPhase.FAILED,
        JobPhase.FINISHED,
    ):
        return
    names, context = job.names, job.context
    launch = job.status.launch
    driver = names.driver_pod(launch)
    pod = await context.kube.pod(names.namespace, driver)
    running = await context.etcd.status(job.keys)
    latest = await context.etcd.latest_checkpoint(job.keys)
    if latest is not None:
        checkpoint = CheckpointSummary(
            latest.checkpoint_id, iso_time(latest.completed_ms / 1000), latest.bytes, latest.duration_ms
        )
        await job.record(last_checkpoint=checkpoint)
    # A pod the kubelet has not reported on yet is Pending; only a missing or Failed pod is lost.
    pod_phase = None if pod is None else (pod.get("status") or {}).get("phase") or "Pending"
    # What an earlier driver said (its failure, its lingering heartbeat) is not this one's:
    # every driver names itself in what it says.
    own = running if running is not None and running.driver == driver else None
    conditions = job.status.conditions
    if own is not None and own.state == "finished" and pod_phase in (None, "Succeeded"):
        message = "the job's sources ran out and it finished"
        await record_stopped(job, JobPhase.FINISHED, message)
        job.inform("Finished", message)
    elif own is not None and own.state == "failed":
        await _job_failed(job, own)
    elif pod_phase in (None, "Failed"):
        await _driver_lost(job, pod_phase)
    elif pod_phase == "Running" and own is not None and own.state == "running":
        generation = job.status.observed_generation or job.generation
        if job.phase is not JobPhase.RUNNING or not job.status.replicas:
            job.inform("Running", f"launch {launch} runs at parallelism {own.parallelism}")
        applied = _applied(job)
        desired = desired_parallelism(applied, own.parallelism) if applied is not None else 0
        await job.record(
            phase=JobPhase.RUNNING,
            replicas=own.parallelism,
            conditions=runs(conditions, running=own.parallelism, desired=desired, generation=generation),
            restarts=own.restarts + job.status.driver_restarts,
        )
        if applied is not None:
            await observe_autoscaler(job, applied)
            await periodic_savepoint(job)
            await keep_savepoint_history(job)  # savepoints also age out between two new ones
    elif job.phase is JobPhase.RUNNING:  # its pod is there, its heartbeat is not
        message = f"driver {driver} has stopped saying it runs"
        if job.status.replicas:  # the first observation without a heartbeat
            job.warn("NoHeartbeat", message)
        silent = set_condition(conditions, "Ready", true=False, reason="NoHeartbeat", message=message)
        await job.record(replicas=0, conditions=silent)


def _applied(job: Job) -> StreamingJobSpec | None:
    """The spec in force (`Job.applied_spec`); None when no spec was ever good."""
    try:
        return job.applied_spec
    except SpecError:
        return None


async def _job_failed(job: Job, outcome: JobStatus) -> None:
    """The driver ended the job with a failure it recorded: one its restart strategy
    gave up on, or a permanent one (`FailureClass`). Relaunching would fail alike:
    the job is Failed until its spec changes (`on_change` takes a new generation as
    a new attempt)."""
    failure_class = outcome.failure_class or FailureClass.TRANSIENT
    cause = outcome.message or "no reason given"
    message = bounded(f"driver {outcome.driver} failed ({failure_class} failure): {cause}", MESSAGE_LIMIT)
    failure = Failure(failure_class, bounded(cause), outcome.driver, outcome.traceback)
    conditions = stopped(job.status.conditions, failed_reason(failure_class), message)
    await job.record(
        phase=JobPhase.FAILED,
        replicas=0,
        conditions=conditions,
        message=message,
        failure=failure,
        restart_at=None,
    )
    job.warn("JobFailed", message)


async def _driver_lost(job: Job, pod_phase: str | None) -> None:
    """The driver's pod is gone or failed and the driver recorded no outcome (it was
    killed, evicted, its node lost): relaunched after the operator's backoff."""
    restarts = job.status.driver_restarts
    why = f"driver {'gone' if pod_phase is None else 'failed'} without a word"
    restart_at = job.status.restart_at
    if restart_at is None:  # a new loss: relaunch after the backoff's delay
        now = time.time()
        history = RestartHistory(job.status.driver_failure_times)
        decision = decide(job.context.lost_driver_backoff, history, now)
        delay = job.context.lost_driver_backoff.max_delay_s if decision.delay_s is None else decision.delay_s
        await job.record(
            phase=JobPhase.RESTARTING,
            restart_at=now + delay,
            message=why,
            driver_failure_times=decision.history.failures,
            replicas=0,
            conditions=changing(job.status.conditions, JobPhase.RESTARTING.value, why, job.generation),
        )
        job.warn("Restarting", f"{why}; relaunch {restarts + 1} in {delay:g} s")
        return
    if time.time() < restart_at or not await _relaunch_allowed(job):
        return
    await job.record(driver_restarts=restarts + 1, restart_at=None)
    await carry_out(job, restart_plan(job, "driver-lost"))


RELAUNCH_REFUSED = "driver not relaunched"


async def _relaunch_allowed(job: Job) -> bool:
    """Whether the spec the lost driver ran passes the operator's checks now: the
    policy, its ServiceAccount and its namespace may have changed since it was
    accepted. While it does not, the job stays Restarting and Degraded says why; it
    is checked again at each observation."""
    try:
        await check_launch(job, job.applied_spec)
    except SpecError as error:
        ran = f"the spec it ran (generation {job.status.accepted_generation})"
        await _refuse(job, error, f"{RELAUNCH_REFUSED}: {ran} is refused now: {error}")
        return False
    if (job.refused or "").startswith(RELAUNCH_REFUSED):  # refused at an earlier observation
        conditions = set_condition(job.status.conditions, "Degraded", true=False, reason="SpecValid")
        await job.record(conditions=conditions, message=None)
    return True
