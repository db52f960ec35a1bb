"""Rescale in place at P = 2 → 3 (`lockgate rescale`, the same run), a refused
target, stop with a savepoint, resume at P = 1 from it: output exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys

from tests.exactness import assert_running_sums_exact
from tests.runtime.recovery.lockgate_process import ask_run_etcd, committed_count, run, wait_for
from tests.runtime.recovery.stopped_sums import COUNT, KEYS, stop_with_savepoint, sums_run

JOB = JobKeys("default", "sums")


def running_parallelism(tmp_path: Path) -> int | None:
    async def ask(etcd: Etcd) -> int | None:
        status = await read_status(etcd, JOB)
        return None if status is None or status.state != "running" else status.parallelism

    return ask_run_etcd(tmp_path, ask, None)


def rescale_in_place(tmp_path: Path, process: subprocess.Popen[str]) -> None:
    out_url = f"file://{tmp_path}/out"
    up = run(tmp_path, "rescale", "sums", "-p", "3")
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.strip().splitlines()[-1] == "3", up.stdout
    assert "rescaled from checkpoint " in up.stdout, up.stdout
    assert running_parallelism(tmp_path) == 3, "the driver's heartbeat reports the new parallelism"
    before = committed_count(out_url)
    wait_for(lambda: committed_count(out_url) > before, "new committed output at P = 3", process)

    refused = run(tmp_path, "rescale", "sums", "-p", "129")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "above the job's maxParallelism 128" in refused.stdout, refused.stdout
    assert refused.stdout.strip().endswith("the job runs at 3"), refused.stdout
    assert process.poll() is None, "the run goes on after a refusal"


def test_rescaled_in_place_stopped_and_resumed_at_1_is_exactly_once(tmp_path: Path) -> None:
    first = stop_with_savepoint(tmp_path, 2, while_running=lambda p: rescale_in_place(tmp_path, p))
    assert "/.lockgate/savepoints/savepoint-" in first
    last = run(tmp_path, *sums_run(tmp_path, 1, "--from-savepoint", first, "--bounded"))
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {first}" in last.stdout

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, COUNT, KEYS)
