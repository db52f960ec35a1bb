"""kill -9 on Spark `local-cluster` (executors in their own JVMs): a Python worker
and an executor JVM, each mid-stream and mid-checkpoint, all in one run.
The driver restarts from the latest checkpoint each time; the committed output
equals the reference exactly."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import Trigger, decode

from tests.exactness import assert_running_sums_exact
from tests.process_tree import executor_jvms, python_task_workers
from tests.runtime.recovery.lockgate_process import (
    ask_run_etcd,
    committed_count,
    finish,
    fixed_delay_restarts,
    restarts,
    start,
    wait_for,
)

COUNT, KEYS = 50_000, 31
KEYS_IN_ETCD = JobKeys("default", "chaos")


async def _checkpoint_in_flight(etcd: Etcd) -> bool:
    trigger = await etcd.get(KEYS_IN_ETCD.trigger)
    latest = await etcd.get(KEYS_IN_ETCD.latest)
    return trigger is not None and decode(Trigger, trigger).checkpoint_id > int(latest or 0)


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
        *fixed_delay_restarts(5),
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
        wait_for(lambda: restarts(tmp_path, KEYS_IN_ETCD) >= kills, f"restart {kills}", process)
        count = committed_count(out)
        wait_for(lambda: committed_count(out) > count, f"output after restart {kills}", process, timeout=180)

    wait_for(lambda: committed_count(out) > 0, "committed output", process)
    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    kill(python_task_workers(process.pid), "Python worker")  # mid-stream
    restarted()

    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    kill(executor_jvms(process.pid), "executor JVM")  # mid-stream
    restarted()

    wait_for(lambda: ask_run_etcd(tmp_path, _checkpoint_in_flight, False), "a checkpoint in flight", process)
    kill(executor_jvms(process.pid), "executor JVM")  # mid-checkpoint
    restarted()

    wait_for(lambda: ask_run_etcd(tmp_path, _checkpoint_in_flight, False), "a checkpoint in flight", process)
    wait_for(lambda: bool(python_task_workers(process.pid)), "a task worker", process)
    kill(python_task_workers(process.pid), "Python worker")  # mid-checkpoint
    stdout, _ = finish(process, timeout=300)

    assert "4 restart(s)" in stdout
    output = read_committed(out)
    assert_running_sums_exact(output, COUNT, KEYS)
