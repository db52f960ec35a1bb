"""kill -9 on a Python worker of a job under backpressure whose checkpoints are
unaligned, on Spark: the checkpoint the restart restores holds records that were
in flight between the tasks, the new launch replays them before new input, and
the committed output is exact — nothing lost, nothing twice."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.keys import JobKeys

from tests.exactness import assert_running_sums_exact
from tests.process_tree import python_task_workers
from tests.runtime.recovery.lockgate_process import finish, fixed_delay_restarts, restarts, start, wait_for

KEYS = JobKeys("default", "unaligned")
COUNT, SUM_KEYS = 4_000, 37
IN_FLIGHT = re.compile(r"checkpoint (\d+) complete: \d+ bytes, (\d+) records in flight \(unaligned\)")
REPLAYED = re.compile(
    r"launch 2 at parallelism 2 restores checkpoint (\d+) .*replaying (\d+) records in flight"
)


def test_a_worker_killed_under_backpressure_restores_the_records_in_flight_and_the_output_is_exact(
    tmp_path: Path,
) -> None:
    out = f"file://{tmp_path}/out"
    log = tmp_path / "run.log"
    process = start(
        tmp_path,
        "run",
        "tests.jobs.configurable:slow_running_sum",
        "--job-id",
        "unaligned",
        "-p",
        "2",
        "--bounded",
        "--checkpoint-interval",
        "0.3",
        "--aligned-checkpoint-timeout",
        "0s",
        *fixed_delay_restarts(3),
        "--arg",
        f"count={COUNT}",
        "--arg",
        f"keys={SUM_KEYS}",
        "--arg",
        "slow_ms=2",  # the sum takes about 1,000 records/s at P = 2
        "--arg",
        "rate=1500",
        "--arg",
        f"output={out}",
        "-v",
        stderr_to=log,
    )
    # Every checkpoint from here on holds records in flight: the slow sum's input stays full.
    wait_for(
        lambda: IN_FLIGHT.search(log.read_text()) is not None, "a checkpoint with records in flight", process
    )
    wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
    os.kill(python_task_workers(process.pid)[0], signal.SIGKILL)
    wait_for(lambda: restarts(tmp_path, KEYS) >= 1, "the restart", process)
    stdout, _ = finish(process, timeout=300)

    assert "1 restart(s)" in stdout
    replayed = REPLAYED.search(log.read_text())
    assert replayed is not None, "the restart restored no checkpoint with records in flight:\n" + "\n".join(
        line for line in log.read_text().splitlines() if "checkpoint" in line
    )
    kept = {int(n): int(records) for n, records in IN_FLIGHT.findall(log.read_text())}
    restored, records = int(replayed.group(1)), int(replayed.group(2))
    assert records == kept[restored] > 0, "the restore replays what the checkpoint kept in flight"
    assert_running_sums_exact(list(read_committed(out)), COUNT, SUM_KEYS)
