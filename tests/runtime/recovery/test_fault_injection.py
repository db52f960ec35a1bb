"""kill -9 on Spark `local-cluster` (executors in their own JVMs): a Python worker
and an executor JVM, each mid-stream and mid-checkpoint, all in one run.
The driver restarts from the latest checkpoint each time; the committed output
equals the reference exactly."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import Trigger, decode

from tests.exactness import assert_running_sums_exact
from tests.process_tree import executor_jvms, python_task_workers
from tests.runtime.recovery.lockgate_process import committed_count, finish, run_record, start, wait_for

COUNT, KEYS = 50_000, 31
KEYS_IN_ETCD = JobKeys("default", "chaos")
T = TypeVar("T")


def _ask_run_etcd(cwd: Path, question: Callable[[Etcd], Awaitable[T]], before_start: T) -> T:
    """`question` answered by the run's embedded etcd; `before_start` while it has none."""
    record = run_record(cwd)
    if record is None:
        return before_start

    async def ask() -> T:
        async with Etcd(EtcdConfig.from_url(record["etcd"])) as etcd:
            return await question(etcd)

    return asyncio.run(ask())


async def _checkpoint_in_flight(etcd: Etcd) -> bool:
    trigger = await etcd.get(KEYS_IN_ETCD.trigger)
    latest = await etcd.get(KEYS_IN_ETCD.latest)
    return trigger is not None and decode(Trigger, trigger).checkpoint_id > int(latest or 0)


async def _restarts(etcd: Etcd) -> int:
    """The run's restarts so far, as its status heartbeat reports them."""
    status = await read_status(etcd, KEYS_IN_ETCD)
    return 0 if status is None else status.restarts


def test_killed_workers_and_executors_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    process = start(
        tmp_path,
        "run",
        "tests.jobs.configurable:running_sum",
        "--job-id",
        "chaos",
        "--master",
        "local-cluster[2,1,1024]",
        "-p",
        "2",
        "--bounded",
        "--checkpoint-interval",
        "0.3",
        "--restart-strategy",
        "fixed-delay",
        "--restart-attempts",
        "5",
        "--restart-delay",
        "0.5",
        "--arg",
        f"count={COUNT}",
        "--arg",
        f"keys={KEYS}",
        "--arg",
        "rate=2500",
        "--arg",
        f"output={out}",
    )

    kills = 0

    def kill(pids: list[int], what: str) -> None:
        nonlocal kills
        assert pids, f"no {what} to kill"
        os.kill(pids[0], signal.SIGKILL)
        kills += 1

    def restarted() -> None:
        """The restart the last kill caused, and output from the relaunch: a kill while
        the previous one's stage is still failing would be no new fault."""
        wait_for(lambda: _ask_run_etcd(tmp_path, _restarts, 0) >= kills, f"restart {kills}", process)
        count = committed_count(out)
        wait_for(lambda: committed_count(out) > count, f"output after restart {kills}", process, timeout=180)

    wait_for(lambda: committed_count(out) > 0, "committed output", process)
    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    kill(python_task_workers(process.pid), "Python worker")  # mid-stream
    restarted()

    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    kill(executor_jvms(process.pid), "executor JVM")  # mid-stream
    restarted()

    wait_for(lambda: _ask_run_etcd(tmp_path, _checkpoint_in_flight, False), "a checkpoint in flight", process)
    kill(executor_jvms(process.pid), "executor JVM")  # mid-checkpoint
    restarted()

    wait_for(lambda: _ask_run_etcd(tmp_path, _checkpoint_in_flight, False), "a checkpoint in flight", process)
    wait_for(lambda: bool(python_task_workers(process.pid)), "a task worker", process)
    kill(python_task_workers(process.pid), "Python worker")  # mid-checkpoint
    stdout, _ = finish(process, timeout=300)

    assert "4 restart(s)" in stdout
    output = read_committed(out)
    assert_running_sums_exact(output, COUNT, KEYS)
