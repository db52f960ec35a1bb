"""Stop with a savepoint at P = 2, resume at P = 3, stop again, finish at P = 1:
`lockgate savepoint --stop` from the run's directory, no flags; output exactly once."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime import read_committed

from tests.exactness import assert_running_sums_exact
from tests.runtime.recovery.lockgate_process import committed_count, finish, run, run_record, start, wait_for

COUNT, KEYS = 24_000, 29
# Records per second: 24 s of input, so that a stop sent by another process comes
# mid-stream even on a loaded machine.
RATE = 1_000


def _job(tmp_path: Path, parallelism: int, *flags: str) -> list[str]:
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


def _stop_with_savepoint(tmp_path: Path, parallelism: int, *flags: str) -> str:
    out_url = f"file://{tmp_path}/out"
    before = committed_count(out_url)
    process = start(tmp_path, *_job(tmp_path, parallelism, *flags))
    wait_for(lambda: committed_count(out_url) > before, f"new committed output at P = {parallelism}", process)
    assert run_record(tmp_path) is not None
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


def test_stop_resume_at_3_stop_finish_at_1_is_exactly_once(tmp_path: Path) -> None:
    first = _stop_with_savepoint(tmp_path, 2)
    assert "/.lockgate/savepoints/savepoint-" in first
    second = _stop_with_savepoint(tmp_path, 3, "--from-savepoint", first)
    last = run(tmp_path, *_job(tmp_path, 1, "--from-savepoint", second, "--bounded"))
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {second}" in last.stdout

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, COUNT, KEYS)
