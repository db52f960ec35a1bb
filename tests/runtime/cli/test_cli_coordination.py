"""`lockgate checkpoints` and `lockgate savepoint`, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from lockgate.runtime.autoscaling.status import AutoscalerStatus, Rescaling
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer, free_port
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import encode
from lockgate.runtime.coordination.restore_point import resolve_restore_point

from tests.polling import eventually_true
from tests.runtime.coordination.running_job import Job
from tests.runtime.snapshot.test_corruption import flip_byte

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
MANUAL = CheckpointConfig(interval_s=None, timeout_s=30, retained=5)


async def lockgate(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        LOCKGATE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _etcd(job: Job, server: EtcdServer, *positional: str) -> list[str]:
    return [job.keys.job, *positional, "--etcd", server.endpoint, "--namespace", job.keys.namespace]


async def test_checkpoints_list_and_show(job: Job, etcd_server: EtcdServer) -> None:
    await job.take_checkpoints(2)

    code, out, _ = await lockgate("checkpoints", "list", *_etcd(job, etcd_server))
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split()[:3] == ["ID", "KIND", "COMPLETED"]
    assert [row.split()[:2] for row in rows] == [["1", "checkpoint"], ["2", "checkpoint"]]
    assert rows[1].endswith(f"/{job.keys.job}/chk-2")
    assert "count=2,source=2" in rows[0]

    code, out, _ = await lockgate("checkpoints", "show", *_etcd(job, etcd_server, "1"))
    assert code == 0
    shown = json.loads(out)
    assert shown["summary"]["checkpoint_id"] == 1
    assert shown["metadata"]["vertices"]["count"]["parallelism"] == 2

    code, out, _ = await lockgate("checkpoints", "show", *_etcd(job, etcd_server))
    assert json.loads(out)["summary"]["checkpoint_id"] == 2, "no N: the latest"

    code, _, err = await lockgate("checkpoints", "show", *_etcd(job, etcd_server, "9"))
    assert code == 1
    assert "no completed checkpoint 9" in err
    assert "completed: 1, 2" in err


async def test_checkpoints_list_shows_a_checkpoint_found_damaged(job: Job, etcd_server: EtcdServer) -> None:
    coordinator = await job.take_checkpoints(2)
    damaged = Path(job.storage.checkpoint_dir(job.keys.job, 2), "count", "0", "keyed")
    flip_byte(str(damaged), 10)
    point = await resolve_restore_point(coordinator.store, accept_duplicates=True)
    assert point is not None

    code, out, _ = await lockgate("checkpoints", "list", *_etcd(job, etcd_server))
    assert code == 0
    header, first, second, reason = out.strip().splitlines()
    assert header.split()[-2:] == ["RESTORE", "PATH"]
    assert first.split()[-2] == "ok"
    assert second.split()[-2] == "unusable"
    assert reason.startswith("checkpoint 2 is unusable (found ")
    assert reason.endswith(f"): snapshot file {damaged}: checksum mismatch")


async def test_savepoint_with_stop_prints_the_path_last(job: Job, etcd_server: EtcdServer) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=60, timeout_s=30))
    await coordinator.start()
    try:
        run = asyncio.create_task(coordinator.run())
        code, out, err = await lockgate("savepoint", *_etcd(job, etcd_server), "--stop", "--id", "sp1")
        stopped_with = await asyncio.wait_for(run, 10)
    finally:
        await coordinator.close()
    assert code == 0, err
    printed = out.strip().splitlines()[-1]
    assert printed.startswith(f"{job.savepoint_dir}/savepoint-sp1-")
    assert stopped_with == printed


async def test_savepoint_of_a_job_that_is_not_running_times_out_clearly(
    job: Job, etcd_server: EtcdServer
) -> None:
    code, _, err = await lockgate("savepoint", *_etcd(job, etcd_server), "--timeout", "0.5")
    assert code == 1
    assert "is the job running?" in err


async def test_a_stop_nobody_served_in_time_expires_instead_of_stopping_a_later_launch(
    job: Job, etcd_server: EtcdServer
) -> None:
    code, _, err = await lockgate(
        "savepoint", *_etcd(job, etcd_server), "--stop", "--id", "late", "--timeout", "1"
    )
    assert code == 1
    assert "expires" in err
    await eventually_true(
        lambda: _absent(job, job.keys.savepoint_request("late")), "etcd dropped the expired request", 15
    )
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30))
    await coordinator.start()
    try:
        run = asyncio.create_task(coordinator.run())
        await asyncio.wait_for(coordinator.trigger(), 10)
        assert not run.done(), "the launch that started after the request expired keeps running"
        assert await job.store.get(job.keys.savepoint_result("late")) is None
    finally:
        run.cancel()
        await coordinator.close()


async def test_a_savepoint_dir_no_task_can_write_is_refused_before_anything_is_sent(
    job: Job, etcd_server: EtcdServer
) -> None:
    """Failed before: `--dir memory://loot` (or a relative dir) was sent, the job stopped
    with a savepoint that no later run could read, as `run --savepoint-dir` refuses."""
    coordinator = job.coordinator(CheckpointConfig(interval_s=60, timeout_s=30))
    await coordinator.start()
    try:
        run = asyncio.create_task(coordinator.run())
        for directory, why in (
            ("memory://loot", "memory:// lives in one process"),
            ("loot", "a relative path"),
        ):
            code, _, err = await lockgate("savepoint", *_etcd(job, etcd_server), "--stop", "--dir", directory)
            assert code == 2, err
            assert f"argument --dir: {directory}: {why}" in err
        assert await job.store.get_prefix(job.keys.savepoint_requests) == [], "nothing was sent"
        assert not run.done(), "the job runs on"
    finally:
        run.cancel()
        await coordinator.close()


async def _absent(job: Job, key: bytes) -> bool:
    return await job.store.get(key) is None


async def test_unreachable_etcd_is_one_clear_line() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, _, err = await lockgate("checkpoints", "list", "some-job", "--etcd", endpoint)
    assert code == 1
    assert err.startswith("lockgate checkpoints: ")
    assert endpoint in err
    assert "Traceback" not in err


async def test_no_etcd_says_how_to_give_one(monkeypatch) -> None:
    monkeypatch.delenv("LOCKGATE_ETCD", raising=False)
    code, _, err = await lockgate("checkpoints", "list", "some-job")
    assert code == 1
    assert "--etcd" in err


async def lockgate_in(cwd: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_ETCD"}
    process = await asyncio.create_subprocess_exec(
        LOCKGATE, *args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_checkpoints_are_listed_and_shown_from_storage_alone_once_etcd_is_gone(
    job: Job, tmp_path: Path
) -> None:
    coordinator = job.coordinator(CheckpointConfig(interval_s=None, timeout_s=30, retained=5))
    job.give_heap_state()
    await coordinator.start()
    try:
        await asyncio.wait_for(coordinator.trigger(), 10)
        await asyncio.wait_for(coordinator.trigger("savepoint", f"{job.savepoint_dir}/savepoint-x"), 10)
        await asyncio.wait_for(coordinator.trigger(), 10)
    finally:
        await coordinator.close()
    flip_byte(f"{job.storage.checkpoint_dir(job.keys.job, 1)}/_metadata", 5)
    where = ["--dir", job.storage.url, "--dir", job.savepoint_dir]

    code, out, err = await lockgate_in(tmp_path, "checkpoints", "list", job.keys.job, *where)
    assert code == 0, err
    header, first, savepoint, third, problem = out.strip().splitlines()
    assert header.split() == ["ID", "KIND", "TAKEN", "(UTC)", "SIZE", "PARALLELISM", "METADATA", "PATH"]
    assert first.split()[0] == "1"
    assert first.split()[-2:] == ["unreadable", f"{job.storage.url}/{job.keys.job}/chk-1"]
    assert savepoint.split()[:2] == ["2", "savepoint"]
    assert savepoint.split()[-2] == "ok"
    assert "count=2,source=2" in savepoint
    assert third.split()[:2] == ["3", "checkpoint"]
    assert problem == f"{job.storage.url}/{job.keys.job}/chk-1 cannot be restored: " + (
        f"SnapshotCorruptError: snapshot file {job.storage.root}/{job.keys.job}/chk-1/_metadata: checksum mismatch"
    )

    one = f"{job.savepoint_dir}/savepoint-x"
    code, out, err = await lockgate_in(tmp_path, "checkpoints", "list", job.keys.job, "--dir", one)
    assert code == 0, err
    assert out.strip().splitlines()[1].split()[-1] == one, "a directory that is one snapshot lists it"

    code, out, err = await lockgate_in(tmp_path, "checkpoints", "show", job.keys.job, *where)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["summary"]["checkpoint_id"] == 3, "no N: the latest"
    assert shown["metadata"]["vertices"]["count"]["parallelism"] == 2

    code, _, err = await lockgate_in(tmp_path, "checkpoints", "show", job.keys.job, "1", *where)
    assert code == 1
    assert f"no checkpoint 1 of job {job.keys.job} with readable metadata" in err
    assert "(there: 2, 3)" in err

    # Ids start over with a new etcd: a second snapshot numbered 3 is not picked silently.
    copy = f"{job.savepoint_dir.removeprefix('file://')}/savepoint-again"
    shutil.copytree(job.storage.checkpoint_dir(job.keys.job, 3), copy)
    code, _, err = await lockgate_in(tmp_path, "checkpoints", "show", job.keys.job, "3", *where)
    assert code == 1
    assert f"2 snapshots of job {job.keys.job} are numbered 3" in err
    assert "savepoint-again" in err


async def test_a_finished_local_runs_checkpoints_are_listed_from_its_directory(
    job: Job, tmp_path: Path
) -> None:
    """After `lockgate run` and its embedded etcd stopped: .lockgate/checkpoints is read."""
    await job.take_checkpoints(1)
    local = tmp_path / "elsewhere" / ".lockgate"
    local.mkdir(parents=True)
    (tmp_path / "checkpoints").rename(local / "checkpoints")

    code, out, err = await lockgate_in(local.parent, "checkpoints", "list", job.keys.job)
    assert code == 0, err
    assert "no etcd given and no `lockgate run` going on here: reading .lockgate/checkpoints" in err
    assert out.strip().splitlines()[1].endswith(f"{local}/checkpoints/{job.keys.job}/chk-1")

    code, _, err = await lockgate_in(tmp_path, "checkpoints", "list", job.keys.job)
    assert code == 1
    assert "or read checkpoint storage with --dir URL" in err


async def test_a_job_with_no_checkpoints_is_named_with_its_namespace(etcd_server: EtcdServer) -> None:
    code, out, err = await lockgate("checkpoints", "list", "nothing-yet", "--etcd", etcd_server.endpoint)
    assert code == 0, err
    assert out.strip() == "job default/nothing-yet has no completed checkpoints"


async def test_autoscaler_shows_the_drivers_decisions_and_says_when_there_are_none(
    etcd_server: EtcdServer,
) -> None:
    endpoint = ["--etcd", etcd_server.endpoint, "--namespace", "streams"]
    code, out, err = await lockgate("autoscaler", "sums", *endpoint)
    assert code == 0, err
    assert out.startswith("job streams/sums has no autoscaler record: it runs without --autoscale"), out

    up = Rescaling(
        1, 1_800_000_000_000, "scale-up", 1, 4, "scale up 1 -> 4: input 150/s", "rescaled", "paused 1 s"
    )
    last = {"atMs": 1_800_000_060_000, "action": "hold", "reason": "hold at 4: input 150/s, backlog 3"}
    record = AutoscalerStatus(4, 1, 8, 1_800_000_060_000, last, 4, {"inputRate": 150.0}, (up,))
    async with Etcd(EtcdConfig.from_url(etcd_server.endpoint)) as etcd:
        await etcd.put(JobKeys("streams", "sums").autoscaler, encode(record))
    code, out, err = await lockgate("autoscaler", "sums", *endpoint)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "parallelism 4 (autoscaled within 1:8), recommendation 4"
    assert lines[1].endswith("hold: hold at 4: input 150/s, backlog 3")
    assert lines[2] == "rescales:", lines
    assert lines[3].endswith(" 1 -> 4 rescaled (paused 1 s): scale up 1 -> 4: input 150/s"), lines
    code, out, err = await lockgate("autoscaler", "sums", *endpoint, "--json")
    assert json.loads(out) == record.to_json()
