"""A savepoint `lockgate.state` wrote, signed with the local job's key, restored by
`lockgate run --from-savepoint` (Spark, the job's key checked as for any restore)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from lockgate.runtime import read_committed
from lockgate.state import KeyContext, SavepointWriter, job_key

from tests.state.test_command import LOCKGATE
from tests.state.test_write import TOTAL

REPO = Path(__file__).resolve().parents[2]
COUNT, KEYS = 300, 5


def test_lockgate_run_restores_a_bootstrapped_savepoint_signed_with_the_jobs_key(tmp_path: Path) -> None:
    # `lockgate run`'s default job id for this entrypoint is its module's name.
    key = job_key("configurable", work_dir=tmp_path / ".lockgate", create=True)
    start = {k: 10_000 * (k + 1) for k in range(KEYS)}

    def set_total(k: Any, records: list[dict[str, int]], ctx: KeyContext) -> None:
        ctx.state(TOTAL).update(records[0]["total"])

    writer = SavepointWriter.new(max_parallelism=128, job_id="configurable")
    table = [{"key": k, "total": t} for k, t in start.items()]
    writer.bootstrap("sum", table, lambda r: r["key"], set_total)
    writer.write(f"file://{tmp_path}/boot", key)

    out = f"file://{tmp_path}/out"
    ran = _lockgate_run(tmp_path, f"file://{tmp_path}/boot", out)
    assert ran.returncode == 0, ran.stderr[-3000:]
    output = read_committed(out)
    assert Counter(r["n"] for r in output) == Counter(range(COUNT)), "every record once"
    for k in range(KEYS):
        sums = sorted(r["sum"] for r in output if r["key"] == k)
        assert sums[0] >= start[k], "on top of the bootstrapped total"
        assert sums[-1] == start[k] + sum(range(k, COUNT, KEYS))


def test_lockgate_run_refuses_a_bootstrapped_savepoint_signed_with_another_key(tmp_path: Path) -> None:
    """Whoever holds another job's key (or none) cannot make a savepoint this job
    restores: refused before the job's state is unpickled, and before Spark starts."""
    job_key("configurable", work_dir=tmp_path / ".lockgate", create=True)
    anothers = job_key("another", work_dir=tmp_path / ".lockgate", create=True)
    writer = SavepointWriter.new(max_parallelism=128, job_id="configurable")
    writer.bootstrap("sum", [0], lambda k: k, lambda k, rs, ctx: ctx.state(TOTAL).update(1))
    writer.write(f"file://{tmp_path}/boot", anothers)

    ran = _lockgate_run(tmp_path, f"file://{tmp_path}/boot", f"file://{tmp_path}/out")
    assert ran.returncode == 2, ran.stderr[-3000:]
    assert "_metadata: is signed, but not with this job's key" in ran.stderr
    assert "--import-unsigned-savepoint" in ran.stderr, "what the user can do"
    assert read_committed(f"file://{tmp_path}/out") == [], "nothing ran"


def _lockgate_run(tmp_path: Path, savepoint: str, out: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            LOCKGATE,
            "run",
            "tests.jobs.configurable:running_sum",
            "--bounded",
            "--parallelism",
            "2",
            "--arg",
            f"count={COUNT}",
            "--arg",
            f"keys={KEYS}",
            "--arg",
            f"output={out}",
            "--from-savepoint",
            savepoint,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
