"""Periodic savepoints and the savepoint history kept by count and age: which
savepoints fall out, which of those the operator disposes of (their files
deleted), and which it never touches — run through the operator's logic on a
real etcd and real files."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lockgate.operator import reconcile
from lockgate.operator.conditions import epoch_of, iso_time
from lockgate.operator.savepoint_history import Retention, SavepointEntry, completed, disposable
from lockgate.operator.status import StreamingJobStatus
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import SavepointResult, encode

from tests.operator.cluster_helpers import NAMESPACE, SPEC, StandInDriver, write_savepoint_files
from tests.operator.job_under_test import JobUnderTest

HOUR = 3600.0


def _entry(
    reason: str, age_s: float, path: str | None = "file:///sp/savepoint-a", **fields: Any
) -> SavepointEntry:
    status = fields.pop("status", "completed")
    return SavepointEntry(reason, iso_time(time.time() - age_s), status, path=path, **fields)


def test_the_history_keeps_the_newest_by_count_and_age() -> None:
    history = [_entry("periodic", age_s=i * HOUR, path=f"file:///sp/savepoint-{i}") for i in range(5)]
    kept, out = Retention(count=3).split(history, time.time(), protected=())
    assert (kept, out) == (history[:3], history[3:])
    kept, out = Retention(count=10, max_age_s=1.5 * HOUR).split(history, time.time(), protected=())
    assert (kept, out) == (history[:2], history[2:])


def test_the_newest_completed_and_the_protected_savepoints_are_kept_whatever_their_age() -> None:
    failed_newest = _entry("periodic", age_s=0, path=None, status="failed", error="disk full")
    old = [_entry("upgrade", age_s=(i + 5) * HOUR, path=f"file:///sp/savepoint-{i}") for i in range(3)]
    history = [failed_newest, *old]
    kept, out = Retention(count=1, max_age_s=HOUR).split(history, time.time(), protected={old[2].path})
    assert kept == [failed_newest, old[0], old[2]], "the newest completed one, and the protected one"
    assert out == [old[1]]


@pytest.mark.parametrize(
    ("reason", "path", "disposed"),
    [
        ("upgrade", "file:///sp/savepoint-upgrade-g2-l2-0a1b2c3d", True),
        ("suspend", "file:///sp/savepoint-suspend-g3-l2-0a1b2c3d", True),
        ("periodic", "file:///sp/savepoint-periodic-1700000000-0a1b2c3d/", True),
        ("trigger nonce 7", "file:///sp/savepoint-nonce-7-0a1b2c3d", False),  # the user asked for it
        ("deletion", "file:///sp/savepoint-delete-l2-0a1b2c3d", False),
        ("upgrade", "file:///other-job/savepoint-upgrade-0a1b2c3d", False),  # not in the job's directory
        ("upgrade", "file:///sp/nested/savepoint-upgrade-0a1b2c3d", False),
        ("upgrade", "file:///sp/chk-12", False),  # a checkpoint's directory, not a savepoint's
        ("upgrade", "file:///sp", False),
    ],
)
def test_only_the_operators_own_savepoints_in_the_jobs_directory_are_disposed_of(
    reason: str, path: str, disposed: bool
) -> None:
    assert disposable(_entry(reason, 0, path=path), "file:///sp") is disposed


def _savepoint_dir(under_test: JobUnderTest, tmp_path: Path) -> str:
    """The job's default savepoint directory (the operator's storage layout)."""
    return f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints/{under_test.name}"


def _on_disk(url: str) -> bool:
    return Path(url.removeprefix("file://")).exists()


async def _observe(under_test: JobUnderTest, spec: dict[str, Any]) -> None:
    await reconcile.observe(await under_test.job(spec))


async def _periodic_due(under_test: JobUnderTest, ago_s: float = 1) -> None:
    """As if the interval has passed since the last periodic savepoint: it was due
    `ago_s` ago (each due time names one savepoint)."""
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, {"nextPeriodicSavepoint": iso_time(time.time() - ago_s)}
    )


async def test_periodic_savepoints_are_taken_and_the_oldest_disposed_of(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    spec = {**SPEC, "savepoints": {"interval": "1h", "historySize": 2}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    driver = StandInDriver(under_test.kube, etcd, under_test.keys, savepoint_dir=directory)
    async with driver.running():
        await _observe(under_test, spec)
        assert driver.requests == [], "the first one is an interval after the job runs"
        due = epoch_of(under_test.status()["nextPeriodicSavepoint"])
        assert time.time() + HOUR - 5 < due <= time.time() + HOUR
        for number in range(3):
            await _periodic_due(under_test, ago_s=10 - number)
            await _observe(under_test, spec)
    assert [request.stop for _, request in driver.requests] == [False, False, False], "the job goes on"
    status = under_test.status()
    taken = [entry["path"] for entry in status["savepoints"]]
    assert len(taken) == 2
    entry = status["savepoints"][0]
    assert (entry["reason"], entry["status"], entry["bytes"]) == ("periodic", "completed", 1000)
    assert status["lastSavepoint"] == entry
    assert all(_on_disk(path) for path in taken)
    disposed = [message for _, reason, message in under_test.events.events if reason == "SavepointDisposed"]
    (message,) = disposed
    assert "periodic" in message
    oldest = message.split(" ")[0]
    assert oldest not in taken
    assert not _on_disk(oldest), "the oldest is gone, files and all"
    assert under_test.events.reasons().count("Savepoint") == 3
    assert epoch_of(status["nextPeriodicSavepoint"]) > time.time() + HOUR - 5, "the next one an interval on"


async def test_savepoints_age_out_but_the_newest_and_the_one_restored_stay(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    spec = {**SPEC, "savepoints": {"historyMaxAge": "1h"}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    paths = [f"{directory}/savepoint-upgrade-g{i}-l{i}-0a1b2c3d" for i in range(4)]
    for path in paths:
        write_savepoint_files(path)
    ages = [3, 4, 5, 6]  # hours: every one older than historyMaxAge
    history = [_entry("upgrade", age_s=age * HOUR, path=path) for age, path in zip(ages, paths, strict=True)]
    restored = paths[2]  # the current launch restored it: its driver may restore it again
    await under_test.kube.patch_status(
        NAMESPACE,
        under_test.name,
        {
            **StreamingJobStatus(savepoints=tuple(history)).for_storage(),
            "deployment": {"launch": 1, "restore": "savepoint", "savepoint": restored},
        },
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await _observe(under_test, spec)
    kept = [entry["path"] for entry in under_test.status()["savepoints"]]
    assert kept == [paths[0], restored], "the newest completed one, and the one restored"
    assert [_on_disk(path) for path in paths] == [True, False, True, False]


async def test_savepoints_the_user_asked_for_or_outside_the_job_leave_the_history_with_their_files(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """A path a driver reported outside the job's savepoint directory is never
    deleted with the operator's credentials, whatever the entry says."""
    spec = {**SPEC, "savepoints": {"historySize": 1}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    newest = f"{directory}/savepoint-periodic-3-0a1b2c3d"
    asked = f"{directory}/savepoint-nonce-7-0a1b2c3d"
    elsewhere = f"file://{tmp_path}/checkpoints/{NAMESPACE}/_savepoints/other-job/savepoint-upgrade-0a1b2c3d"
    for path in (newest, asked, elsewhere):
        write_savepoint_files(path)
    history = [
        _entry("periodic", age_s=0, path=newest),
        _entry("trigger nonce 7", age_s=60, path=asked),
        _entry("upgrade", age_s=120, path=elsewhere),
    ]
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(history)).for_storage()
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        await _observe(under_test, spec)
    assert [entry["path"] for entry in under_test.status()["savepoints"]] == [newest]
    assert all(_on_disk(path) for path in (newest, asked, elsewhere))
    assert "SavepointDisposed" not in under_test.events.reasons()


@contextlib.contextmanager
def _undeletable(directory: Path) -> Iterator[None]:
    """`directory` cannot be removed, even by root (whom permissions do not stop)."""
    locked = directory / "state"
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(locked)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
    else:
        directory.chmod(0o500)
        try:
            yield
        finally:
            directory.chmod(0o700)


async def test_a_savepoint_whose_files_cannot_be_deleted_stays_in_the_history_until_they_are(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    spec = {**SPEC, "savepoints": {"historySize": 1}}
    await under_test.running(spec)
    directory = _savepoint_dir(under_test, tmp_path)
    paths = [f"{directory}/savepoint-upgrade-g{i}-l{i}-0a1b2c3d" for i in range(2)]
    for path in paths:
        write_savepoint_files(path)
    history = [_entry("upgrade", age_s=i * 60, path=path) for i, path in enumerate(paths)]
    await under_test.kube.patch_status(
        NAMESPACE, under_test.name, StreamingJobStatus(savepoints=tuple(history)).for_storage()
    )
    async with StandInDriver(under_test.kube, etcd, under_test.keys).running():
        with _undeletable(Path(paths[1].removeprefix("file://"))):
            await _observe(under_test, spec)
            await _observe(under_test, spec)
        history = under_test.status()["savepoints"]
        assert [entry["path"] for entry in history] == paths
        assert history[1]["error"].startswith("not disposed of: PermissionError")
        assert under_test.events.reasons() == ["Running", "SavepointDisposalFailed"], "told once"
        await _observe(under_test, spec)
    assert [entry["path"] for entry in under_test.status()["savepoints"]] == paths[:1]
    assert not _on_disk(paths[1])


async def test_a_periodic_savepoint_that_fails_is_in_the_history_and_the_next_comes_an_interval_on(
    under_test: JobUnderTest, etcd: Etcd
) -> None:
    spec = {**SPEC, "savepoints": {"interval": "10m", "timeout": "200ms"}}
    await under_test.running(spec)
    async with StandInDriver(under_test.kube, etcd, under_test.keys, answer=False).running():
        await _periodic_due(under_test)
        await _observe(under_test, spec)
    status = under_test.status()
    (entry,) = status["savepoints"]
    assert (entry["reason"], entry["status"], entry["error"]) == (
        "periodic",
        "failed",
        "no savepoint within 0.2 s",
    )
    assert "lastSavepoint" not in status, "the last savepoint is the last one completed"
    assert under_test.events.reasons() == ["Running", "SavepointTimedOut"]
    assert epoch_of(status["nextPeriodicSavepoint"]) > time.time() + 500


async def test_a_periodic_savepoint_answered_before_the_operator_restarted_is_neither_asked_nor_recorded_twice(
    under_test: JobUnderTest, etcd: Etcd, tmp_path: Path
) -> None:
    """Stopped after recording the savepoint, before recording when the next is due."""
    spec = {**SPEC, "savepoints": {"interval": "1h"}}
    await under_test.running(spec)
    due = iso_time(time.time() - 5)
    path = f"{_savepoint_dir(under_test, tmp_path)}/savepoint-periodic-1-0a1b2c3d"
    write_savepoint_files(path)
    answer = SavepointResult("completed", path, bytes=1000)
    await etcd.put(under_test.keys.savepoint_result(f"periodic-{int(epoch_of(due))}"), encode(answer))
    recorded = completed(path, "periodic", 1000, epoch_of(due))
    await under_test.kube.patch_status(
        NAMESPACE,
        under_test.name,
        StreamingJobStatus(next_periodic_savepoint=due, savepoints=(recorded,)).for_storage(),
    )
    driver = StandInDriver(under_test.kube, etcd, under_test.keys)
    async with driver.running():
        await _observe(under_test, spec)
    assert driver.requests == [], "its answer is taken, not asked for again"
    status = under_test.status()
    assert StreamingJobStatus.from_storage(status).savepoints == (recorded,)
    assert epoch_of(status["nextPeriodicSavepoint"]) > time.time() + HOUR - 5
