"""The savepoints the operator asks a running job for, and their history in
`status.savepoints` (what it keeps and disposes of: `savepoint_history.py`).

Every answer is recorded — a completed savepoint, a failure, a timeout — and
an answer that comes after its request timed out is picked up later, so a
savepoint a driver wrote is not left out of the history (and never disposed
of) — unless it comes more than an hour late (`ANSWER_WAIT_S`): then its files
stay where the driver wrote them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from lockgate.operator.conditions import epoch_of, iso_time
from lockgate.operator.driver_pod import storage_layout
from lockgate.operator.job import Job
from lockgate.operator.savepoint_history import (
    MAX_ENTRIES,
    Retention,
    SavepointEntry,
    completed,
    disposable,
    failed,
)
from lockgate.runtime.coordination.records import SavepointResult
from lockgate.runtime.snapshot.storage import CheckpointStorage

ANSWER_WAIT_S = 3600.0
"""How long a timed-out request's answer is looked for: a driver stopped while it
took the savepoint leaves it `pending` for good."""


async def ask_savepoint(job: Job, request_id: str, *, stop: bool) -> SavepointResult | None:
    """Request a savepoint and wait up to `savepoints.timeout`; None when none came."""
    spec, started = job.applied_spec, time.monotonic()
    try:
        result = await job.context.etcd.savepoint(
            job.keys,
            request_id=request_id,
            stop=stop,
            directory=spec.savepoints.dir,
            timeout_s=spec.savepoints.timeout_s,
        )
    except TimeoutError:
        job.context.metrics.savepoint_took(job.names.qualified, "timeout", time.monotonic() - started)
        return None
    job.context.metrics.savepoint_took(job.names.qualified, result.status, time.monotonic() - started)
    return result


async def record_outcome(job: Job, reason: str, request: str, result: SavepointResult | None) -> None:
    """The answer to `request` (None: none within the timeout), with an Event for a failure."""
    now, timeout = time.time(), job.applied_spec.savepoints.timeout_s
    if result is None:
        job.warn("SavepointTimedOut", f"{reason}: no savepoint within {timeout:g} s")
        await record_savepoint(job, failed(reason, f"no savepoint within {timeout:g} s", now, request))
    elif result.status != "completed" or result.path is None:
        job.warn("SavepointFailed", f"{reason}: {result.error}")
        await record_savepoint(job, failed(reason, str(result.error), now))
    else:
        await record_savepoint(job, completed(result.path, reason, result.bytes, now))


async def periodic_savepoint(job: Job) -> None:
    """`spec.savepoints.interval`: a savepoint when the next one recorded in status is
    due. Its request id is that time, so an operator restarted while waiting for it
    takes the same savepoint's answer instead of asking again; the answer is recorded
    before the next due time, so it is never left unrecorded."""
    interval, now = job.applied_spec.savepoints.interval_s, time.time()
    due = epoch_of(job.status.next_periodic_savepoint)
    if interval is None:
        await job.record(next_periodic_savepoint=None)
        return
    if due is None or due > now + interval:  # none yet, unreadable, or the interval was shortened
        await job.record(next_periodic_savepoint=iso_time(now + interval))
        return
    if now < due:
        return
    request = f"periodic-{int(due)}"
    answered = await job.context.etcd.savepoint_result(job.keys, request)
    await record_outcome(job, "periodic", request, answered or await ask_savepoint(job, request, stop=False))
    await job.record(next_periodic_savepoint=iso_time(time.time() + interval))


async def record_savepoint(job: Job, entry: SavepointEntry) -> None:
    """Put `entry` at the head of `status.savepoints` (once: an operator restarted
    before it recorded what came after may record the same answer again), keeping
    the history in the same write."""
    history = job.status.savepoints
    if entry.path is not None and any(taken.path == entry.path for taken in history):
        return
    await _keep(job, [entry, *history], new=entry)


async def keep_savepoint_history(job: Job) -> None:
    """Late answers taken in, then what falls out by count and age dropped."""
    history = await _late_answers(job, job.status.savepoints)
    await _keep(job, history, new=None)


async def _late_answers(job: Job, history: Sequence[SavepointEntry]) -> list[SavepointEntry]:
    """Entries whose request timed out, with the answer the driver gave since: a
    savepoint that took longer than the timeout is recorded, not left unknown."""
    updated: list[SavepointEntry] = []
    for entry in history:
        answered = entry if entry.request is None else await _answer_to(job, entry, entry.request)
        recorded = {e.path for e in [*history, *updated] if e is not entry and e.path is not None}
        if answered is not entry and answered.path in recorded:
            continue  # recorded already (an operator that asked again after a restart)
        if answered.status == "completed" and entry.status == "failed":
            size = "" if answered.bytes is None else f", {answered.bytes} bytes"
            job.inform("Savepoint", f"savepoint {answered.path} ({answered.reason}, late{size})")
        updated.append(answered)
    return updated


async def _answer_to(job: Job, entry: SavepointEntry, request: str) -> SavepointEntry:
    answer = await job.context.etcd.savepoint_answer(job.keys, request)
    if answer is not None and answer.status == "completed" and answer.path is not None:
        return completed(answer.path, entry.reason, answer.bytes, time.time())
    given_up = entry.age_s(time.time()) > ANSWER_WAIT_S  # the driver that began it is gone, say
    if answer is None and not given_up and await job.context.etcd.savepoint_requested(job.keys, request):
        return entry  # still queued: it may yet be served
    if answer is None or answer.status == "failed" or given_up:  # final: no answer will come
        return dataclasses.replace(entry, request=None)
    return entry  # being taken


async def _keep(job: Job, history: Sequence[SavepointEntry], new: SavepointEntry | None) -> None:
    spec = job.applied_spec
    retention, now = Retention(spec.savepoints.history_size, spec.savepoints.history_max_age_s), time.time()
    out: list[SavepointEntry] = []
    if retention.split(history, now, protected=())[1]:  # only then is etcd read
        deployment = job.status.deployment
        protected = {deployment.savepoint if deployment else None, job.status.suspended_with}
        protected |= await job.context.etcd.snapshot_paths(job.keys)
        out = retention.split(history, now, {path for path in protected if isinstance(path, str)})[1]
    savepoint_dir = storage_layout(job.names, spec, job.context.cluster).savepoints
    gone, undisposed = await _dispose_of(job, [e for e in out if disposable(e, savepoint_dir)])
    gone += [entry for entry in out if not disposable(entry, savepoint_dir)]
    kept = [undisposed.get(entry, entry) for entry in history if entry not in gone]
    if len(kept) > MAX_ENTRIES:  # disposals keep failing, or protected entries pile up
        dropped = [entry.path or entry.reason for entry in kept[MAX_ENTRIES:]]
        job.warn("SavepointHistoryFull", f"left the history with their files kept: {', '.join(dropped)}")
        kept = kept[:MAX_ENTRIES]
    fields: dict[str, Any] = {"savepoints": tuple(kept)}
    if new is not None and new.status == "completed":
        fields["last_savepoint"] = new
    await job.record(**fields)
    if new is not None and new.status == "completed":
        size = "" if new.bytes is None else f", {new.bytes} bytes"
        job.inform("Savepoint", f"savepoint {new.path} ({new.reason}{size})")


async def _dispose_of(
    job: Job, entries: list[SavepointEntry]
) -> tuple[list[SavepointEntry], dict[SavepointEntry, SavepointEntry]]:
    """(the entries whose files are gone, the entries kept with why not)."""
    gone, undisposed = [], {}
    for entry in entries:
        assert entry.path is not None, "a disposable savepoint has a path"
        try:
            found = await asyncio.to_thread(_dispose, entry.path)
        except Exception as error:  # noqa: BLE001 — any storage error: kept, tried again next time
            why = f"not disposed of: {type(error).__name__}: {error}"[:300]
            if entry.error != why:  # told once, not at every observation
                job.warn("SavepointDisposalFailed", f"{entry.path} stays in the history, {why}")
                undisposed[entry] = dataclasses.replace(entry, error=why)
            continue
        if found:
            job.inform("SavepointDisposed", f"{entry.path} ({entry.reason}, {entry.time}) left the history")
        else:
            job.warn(
                "SavepointNotFound",
                f"{entry.path} ({entry.reason}) left the history but was not found, so nothing was "
                "disposed of: if the operator does not reach this storage (a file:// volume it does "
                "not mount), its files are still there",
            )
        gone.append(entry)
    return gone, undisposed


def _dispose(path: str) -> bool:
    """Delete the savepoint at `path`; False when there is nothing there."""
    storage = CheckpointStorage(path)
    if not storage.exists(storage.root):
        return False
    storage.delete(storage.root, recursive=True)
    return True
