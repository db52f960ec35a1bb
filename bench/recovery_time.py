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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, decode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.process_tree import python_task_workers  # noqa: E402

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
KEYS = JobKeys("default", "state")


class Job:
    def __init__(self, work: Path, parallelism: int, keys: int, value_bytes: int, *flags: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
        args = [f"keys={keys}", f"value_bytes={value_bytes}", f"output=file://{work}/out"]
        command = [LOCKGATE, "run", "state_job:build", "--job-id", "state", "-p", str(parallelism)]
        command += ["--checkpoint-interval", "5", "--restart-delay", "0", *flags]
        command += [x for a in args for x in ("--arg", a)]
        self.process = subprocess.Popen(
            command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.work = work

    def etcd(self) -> Etcd:
        while not (self.work / ".lockgate" / "run.json").exists():
            if self.process.poll() is not None:
                raise SystemExit(f"the run ended with {self.process.returncode}")
            time.sleep(0.1)
        record = json.loads((self.work / ".lockgate" / "run.json").read_text())
        return Etcd(EtcdConfig.from_url(record["etcd"]))


async def progress(etcd: Etcd, since_ms: int = 0) -> tuple[int, int]:
    """Records read by the tasks that reported after `since_ms`, and their count."""
    rows = [json.loads(v) for _, v in await etcd.get_prefix(KEYS.progress)]
    fresh = [r for r in rows if r["at_ms"] > since_ms]
    return sum(r["read"] for r in fresh), len(fresh)


async def latest(etcd: Etcd) -> CompletedCheckpoint | None:
    n = await etcd.get(KEYS.latest)
    data = None if n is None else await etcd.get(KEYS.completed_of(int(n)))
    return None if data is None else decode(CompletedCheckpoint, data)


async def rate(etcd: Etcd, seconds: float = 4.0) -> float:
    first, _ = await progress(etcd)
    await asyncio.sleep(seconds)  # measuring a rate over a window
    last, _ = await progress(etcd)
    return (last - first) / seconds


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
        while (await progress(etcd))[0] < keys * 1.2:
            await asyncio.sleep(0.5)
        filled = await latest(etcd)
        while (await latest(etcd)) == filled:  # a checkpoint taken after every key was seen
            await asyncio.sleep(0.5)
        checkpoint = await latest(etcd)
        assert checkpoint is not None
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
