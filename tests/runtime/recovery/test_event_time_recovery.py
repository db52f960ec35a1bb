"""kill -9 on a Python worker of a job whose output comes from event-time timers
(session windows over out-of-order input): the run restarts from its latest
checkpoint — window contents and timers restored by key group — and the committed
sessions are exactly the plain-Python reference, none twice."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys

from tests.jobs.sessions import write_sessions
from tests.process_tree import python_task_workers
from tests.runtime.recovery.lockgate_process import (
    finish,
    fixed_delay_restarts,
    restarts,
    run_record,
    start,
    wait_for,
)

KEYS = JobKeys("default", "sessions")


def _etcd_says(cwd: Path, key: bytes) -> bytes | None:
    record = run_record(cwd)
    if record is None:
        return None

    async def ask() -> bytes | None:
        async with Etcd(EtcdConfig.from_url(record["etcd"])) as etcd:
            return await etcd.get(key)

    return asyncio.run(ask())


def test_a_killed_worker_of_a_session_window_job_loses_and_repeats_no_session(tmp_path: Path) -> None:
    expected = write_sessions(tmp_path / "events", users=150, partitions=4, seed=5)
    out = f"file://{tmp_path}/out"
    process = start(
        tmp_path,
        "run",
        "tests.jobs.sessions:sessions_job",
        "--job-id",
        "sessions",
        "-p",
        "2",
        "--bounded",
        "--checkpoint-interval",
        "0.3",
        *fixed_delay_restarts(3),
        "--arg",
        f"input=file://{tmp_path}/events",
        "--arg",
        f"output={out}",
        "--arg",
        "delay_s=0.004",
    )
    wait_for(lambda: _etcd_says(tmp_path, KEYS.latest) is not None, "a completed checkpoint", process)
    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    os.kill(python_task_workers(process.pid)[0], signal.SIGKILL)  # mid-stream, windows open
    wait_for(lambda: restarts(tmp_path, KEYS) >= 1, "the restart", process)
    stdout, _ = finish(process, timeout=300)

    assert "1 restart(s)" in stdout
    got = [(r["user"], r["start"], r["end"], r["count"]) for r in read_committed(out)]
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == expected
