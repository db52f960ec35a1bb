"""Stop with a savepoint at P = 2, resume at P = 3, stop again, finish at P = 1:
`lockgate savepoint --stop` from the run's directory, no flags; output exactly once."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime import read_committed

from tests.exactness import assert_running_sums_exact
from tests.runtime.recovery.lockgate_process import run
from tests.runtime.recovery.stopped_sums import COUNT, KEYS, stop_with_savepoint, sums_run


def test_stop_resume_at_3_stop_finish_at_1_is_exactly_once(tmp_path: Path) -> None:
    first = stop_with_savepoint(tmp_path, 2)
    assert "/.lockgate/savepoints/savepoint-" in first
    second = stop_with_savepoint(tmp_path, 3, "--from-savepoint", first)
    last = run(tmp_path, *sums_run(tmp_path, 1, "--from-savepoint", second, "--bounded"))
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {second}" in last.stdout

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, COUNT, KEYS)
