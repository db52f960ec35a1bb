"""Recovery time and rescale downtime with ~100 MB and ~1 GB of RocksDB state.

Runs `lockgate run state_job:build -p 2` (every key holds 1 KB of random bytes;
an unbounded generator rewrites them at full speed) in a directory of its own,
waits until every key is in state and a checkpoint holds it, then:

- recovery: SIGKILL a task's Python worker; time until the job reads records
  again, and until it is back at 80% of its steady rate (restart, restore of
  the latest checkpoint, sources rewound);
- rescale: `lockgate savepoint state --stop`, then `lockgate run -p 3
  --from-savepoint PATH`; time from the stop request until the new run reads
  records, and until it is at 80% of the old steady rate.

Rates come from the tasks' progress in etcd (published every second), so
times are good to about a second.

    .venv/bin/python bench/recovery_time.py [--keys 100000 1000000] [--value-bytes 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lockgate.runtime.coordination.etcd import Etcd
from state_run import LOCKGATE, ROOT, Job, filled, progress, rate

sys.path.insert(0, str(ROOT))
from tests.process_tree import python_task_workers


async def back_to_rate(
    etcd: Etcd, since_ms: int, started: float, target: float, tasks: int
) -> tuple[float, float]:
    """Seconds from `started` until the new tasks read records, and until their rate reached `target`."""
    reading_at = None
    samples: list[tuple[float, int]] = []
    while True:
        read, reporting = await progress(etcd, since_ms)
        now = time.monotonic()
        if reporting == tasks and read > 0:
            reading_at = reading_at or now
            samples.append((now, read))
            window = [s for s in samples if now - s[0] <= 2.0]
            span = window[-1][0] - window[0][0]
            if span >= 1.5 and (window[-1][1] - window[0][1]) / span >= target:
                return reading_at - started, now - started
        await asyncio.sleep(0.25)  # polling etcd


async def measure(work: Path, keys: int, value_bytes: int) -> None:
    job = Job(work, 2, keys, value_bytes)
    async with job.etcd() as etcd:
        checkpoint = await filled(etcd, keys)
        steady = await rate(etcd)
        print(
            f"state {checkpoint.bytes / 1e6:,.0f} MB in checkpoint {checkpoint.checkpoint_id} "
            f"(took {checkpoint.duration_ms} ms); steady rate {steady:,.0f} records/s at P = 2",
            flush=True,
        )

        victim = python_task_workers(job.process.pid)[0]
        killed_ms, started = time.time_ns() // 1_000_000, time.monotonic()
        os.kill(victim, signal.SIGKILL)
        reading, full = await back_to_rate(etcd, killed_ms, started, 0.8 * steady, 2)
        print(
            f"  recovery: reading again after {reading:.1f} s, at 80% of the steady rate after {full:.1f} s",
            flush=True,
        )
        steady = await rate(etcd)

        stop_ms, started = time.time_ns() // 1_000_000, time.monotonic()
        result = subprocess.run(
            [LOCKGATE, "savepoint", "state", "--stop"], cwd=work, capture_output=True, text=True, check=True
        )
        savepoint = result.stdout.strip().splitlines()[-1]
        job.process.wait()
        stopped = time.monotonic() - started
    resumed = Job(work, 3, keys, value_bytes, "--from-savepoint", savepoint)
    async with resumed.etcd() as etcd:
        reading, full = await back_to_rate(etcd, stop_ms, started, 0.8 * steady, 3)
        print(
            f"  rescale 2 -> 3: stopped with a savepoint after {stopped:.1f} s; reading again after "
            f"{reading:.1f} s, at 80% of the old steady rate after {full:.1f} s",
            flush=True,
        )
    resumed.process.send_signal(signal.SIGTERM)
    resumed.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--value-bytes", type=int, default=1000)
    arguments = parser.parse_args()
    for keys in arguments.keys:
        work = Path(tempfile.mkdtemp(prefix="lockgate-recovery-bench-"))
        try:
            asyncio.run(measure(work, keys, arguments.value_bytes))
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
