"""The driver as the operator starts it: `python -m lockgate.runtime.driver.submit
[spark-submit options] -- JOB --etcd URL [driver options]`, a
shared etcd, storage URLs given. Stop it with a savepoint through etcd, resume
at P = 3 from that savepoint; the status in etcd tells how each run ended, and
the output is exactly once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.leadership import Leadership
from lockgate.runtime.coordination.records import CoordinatorRecord, JobStatus, decode

from tests.exactness import assert_running_sums_exact
from tests.runtime.recovery.lockgate_process import (
    committed_count,
    environment,
    run,
    run_command,
    wait_for,
)

COUNT, KEYS = 20_000, 23


def _command(tmp_path: Path, etcd: str, job: JobKeys, parallelism: int, *flags: str) -> list[str]:
    """The command the operator's driver pods run, with local[P] for the cluster."""
    command = [
        sys.executable,
        "-m",
        "lockgate.runtime.driver.submit",
        "--master",
        f"local[{parallelism}]",
        "--",
    ]
    command += ["tests.jobs.configurable:running_sum"]
    command += ["--etcd", etcd, "--namespace", job.namespace, "--job-id", job.job, "-p", str(parallelism)]
    command += ["--checkpoint-interval", "0.3", "--checkpoint-dir", f"file://{tmp_path}/checkpoints"]
    command += ["--savepoint-dir", f"file://{tmp_path}/savepoints", "--work-dir", str(tmp_path / "work")]
    job_args = {"count": COUNT, "keys": KEYS, "rate": 4000, "output": f"file://{tmp_path}/out"}
    command += [x for key, value in job_args.items() for x in ("--arg", f"{key}={value}")]
    return [*command, *flags]


def _submit(tmp_path: Path, etcd: str, job: JobKeys, parallelism: int, *flags: str) -> subprocess.Popen[str]:
    command = _command(tmp_path, etcd, job, parallelism, *flags)
    log = (tmp_path / f"driver-p{parallelism}.log").open("w")  # Spark's logs, read on failure
    return subprocess.Popen(
        command, cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=log, text=True
    )


def _status(etcd: str, job: JobKeys) -> JobStatus | None:
    async def read() -> JobStatus | None:
        async with Etcd(EtcdConfig.from_url(etcd)) as client:
            return await read_status(client, job)

    return asyncio.run(read())


def _ended(driver: subprocess.Popen[str], tmp_path: Path, parallelism: int) -> list[str]:
    out, _ = driver.communicate(timeout=180)
    log = (tmp_path / f"driver-p{parallelism}.log").read_text()
    assert driver.returncode == 0, f"exit {driver.returncode}:\n{out}\n{log[-4000:]}"
    return out.strip().splitlines()


def test_submitted_driver_stops_with_a_savepoint_and_resumes_at_3(
    tmp_path: Path, etcd_server, keys: JobKeys
) -> None:
    etcd, out = etcd_server.endpoint, f"file://{tmp_path}/out"
    first = _submit(tmp_path, etcd, keys, 2)
    wait_for(lambda: committed_count(out) > 0, "committed output at P = 2", first)
    running = _status(etcd, keys)
    assert running is not None
    assert (running.state, running.parallelism) == ("running", 2)

    stop = run(tmp_path, "savepoint", keys.job, "--stop", "--etcd", etcd, "--namespace", keys.namespace)
    assert stop.returncode == 0, stop.stderr
    savepoint = stop.stdout.strip().splitlines()[-1]
    assert savepoint.startswith(f"file://{tmp_path}/savepoints/savepoint-")
    assert _ended(first, tmp_path, 2)[-1] == savepoint, "the driver prints the savepoint path last"
    stopped = _status(etcd, keys)
    assert stopped is not None
    assert (stopped.state, stopped.savepoint) == ("stopped", savepoint)
    assert committed_count(out) < COUNT, "the job was stopped mid-stream"

    second = _submit(tmp_path, etcd, keys, 3, "--from-savepoint", savepoint, "--bounded")
    lines = _ended(second, tmp_path, 3)
    assert lines[-1].startswith(f"job {keys.job}: read "), "a finished run ends with its totals"
    finished = _status(etcd, keys)
    assert finished is not None
    assert (finished.state, finished.parallelism, finished.savepoint) == ("finished", 3, None)

    output = read_committed(out)
    assert_running_sums_exact(output, COUNT, KEYS)


def _killed_drivers_lease(etcd: str, job: JobKeys, ttl_s: int) -> str:
    """What a driver killed mid-run leaves in etcd: its coordinator record, bound to
    a lease nobody refreshes any more. Its coordinator id."""

    async def abandoned() -> str:
        async with Etcd(EtcdConfig.from_url(etcd)) as client:
            leadership = Leadership(client, job, ttl_s)
            await leadership.acquire()
            leadership.abandon()
            return leadership.record.coordinator_id

    return asyncio.run(abandoned())


def _leader_when_first_running(etcd: str, job: JobKeys, driver: str, process: subprocess.Popen[str]) -> str:
    """Which coordinator held the job when `driver` first said it was running."""

    async def watch() -> str:
        async with Etcd(EtcdConfig.from_url(etcd)) as client:
            while process.poll() is None:
                status = await read_status(client, job)
                leader = await client.get(job.coordinator)
                if status is not None and (status.driver, status.state) == (driver, "running"):
                    assert leader is not None, "a running driver leads the job"
                    return decode(CoordinatorRecord, leader).coordinator_id
                await asyncio.sleep(0.05)  # the polling interval of what etcd says
        raise AssertionError(f"{driver} ended without saying it was running")

    return asyncio.run(asyncio.wait_for(watch(), 180))


def test_a_driver_waits_out_a_killed_drivers_lease_with_takeover_wait(
    tmp_path: Path, etcd_server, keys: JobKeys
) -> None:
    etcd, out = etcd_server.endpoint, f"file://{tmp_path}/out"
    # Longer than a driver takes to start (spark-submit, a JVM, a Spark session), with room
    # for a loaded 2-core machine: a shorter lease lapses before the driver to be refused asks.
    dead = _killed_drivers_lease(etcd, keys, ttl_s=60)
    waiting = _submit(
        tmp_path, etcd, keys, 2, "--bounded", "--takeover-wait", "120", "--driver-name", "waiter"
    )
    refuse = ["--restart-strategy", "none", "--work-dir", str(tmp_path / "w2")]
    refused = run_command(tmp_path, _command(tmp_path, etcd, keys, 1, *refuse), timeout=180)
    assert refused.returncode == 1, refused.stdout
    assert f"already coordinated by coordinator {dead}" in refused.stdout
    assert "--takeover-wait" in refused.stdout, "the refusal says how to wait instead"
    leader = _leader_when_first_running(etcd, keys, "waiter", waiting)
    assert leader != dead, "a driver still waiting for the job is not yet reported running"

    lines = _ended(waiting, tmp_path, 2)
    assert lines[-1].startswith(f"job {keys.job}: read "), "the waiting driver ran the job to its end"
    # spark-submit merges the Python driver's log into its stdout.
    waited = [line for line in lines if f"is coordinated by coordinator {dead} " in line]
    assert waited, "the driver waited for the dead one's lease"
    assert "waiting up to" in waited[0]
    assert sorted(r["n"] for r in read_committed(out)) == list(range(COUNT))


def test_a_driver_that_gives_up_exits_1_with_the_cause_in_etcd(
    tmp_path: Path, etcd_server, keys: JobKeys
) -> None:
    etcd = etcd_server.endpoint
    # Checkpoint storage where a file blocks the job's directory: the first checkpoint fails the job.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / keys.job).touch()
    driver = _submit(tmp_path, etcd, keys, 1, "--restart-strategy", "none")
    out, _ = driver.communicate(timeout=180)
    assert driver.returncode == 1, out
    assert f"lockgate driver: job {keys.job} failed: " in out  # spark-submit merges stderr into stdout
    failed = _status(etcd, keys)
    assert failed is not None
    assert failed.state == "failed"
    assert failed.message is not None
    assert "no restarts" in failed.message
    assert "consecutive checkpoints failed" in failed.message, failed.message


@pytest.mark.parametrize(
    ("arguments", "culprit"),
    [
        (["no_such_module:build"], "no_such_module"),
        (
            ["tests.jobs.configurable:running_sum", "--takeover-wait", "-5"],
            "argument --takeover-wait: '-5' is not a duration",
        ),
    ],
    ids=["job that does not resolve", "negative takeover wait"],
)
def test_bad_options_exit_2_before_spark_starts(
    tmp_path: Path, etcd_server, arguments: list[str], culprit: str
) -> None:
    driver = run_command(
        tmp_path,
        [sys.executable, "-m", "lockgate.runtime.driver", *arguments, "--etcd", etcd_server.endpoint],
        timeout=60,
    )
    assert driver.returncode == 2
    assert culprit in driver.stderr
