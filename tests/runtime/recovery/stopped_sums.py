"""A running sum run by `lockgate run` in a directory of its own and stopped with a
savepoint by `lockgate savepoint --stop` from another process, mid-stream."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.runtime.recovery.lockgate_process import committed_count, finish, run, run_record, start, wait_for

COUNT, KEYS = 24_000, 29
# Records per second: 24 s of input, so that a stop sent by another process comes
# mid-stream even on a loaded machine.
RATE = 1_000


def sums_run(tmp_path: Path, parallelism: int, *flags: str) -> list[str]:
    return [
        "run",
        "tests.jobs.configurable:running_sum",
        "--job-id",
        "sums",
        "-p",
        str(parallelism),
        "--checkpoint-interval",
        "0.3",
        "--arg",
        f"count={COUNT}",
        "--arg",
        f"keys={KEYS}",
        "--arg",
        f"rate={RATE}",
        "--arg",
        f"output=file://{tmp_path}/out",
        *flags,
    ]


def stop_with_savepoint(
    tmp_path: Path,
    parallelism: int,
    *flags: str,
    while_running: Callable[[subprocess.Popen[str]], None] = lambda _: None,
) -> str:
    """`while_running` is called once the run committed output, before the stop."""
    out_url = f"file://{tmp_path}/out"
    before = committed_count(out_url)
    process = start(tmp_path, *sums_run(tmp_path, parallelism, *flags))
    wait_for(lambda: committed_count(out_url) > before, f"new committed output at P = {parallelism}", process)
    assert run_record(tmp_path) is not None
    while_running(process)
    savepoint = run(tmp_path, "savepoint", "sums", "--stop")
    assert savepoint.returncode == 0, savepoint.stderr
    path = savepoint.stdout.strip().splitlines()[-1]
    out, _ = finish(process)
    assert f"at parallelism {parallelism}" in out
    assert out.strip().splitlines()[-1] == path, "the run prints the savepoint path last and exits 0"
    committed = committed_count(out_url)
    assert committed < COUNT, "the job was stopped mid-stream"
    # The final line counts what this run's sinks committed: the output, to the record.
    assert f", committed {committed - before:,} to the sinks;" in out, out
    return path
