"""A `lockgate run` of `state_job.py` in a directory of its own, and what the
state benchmarks (`recovery_time.py`, `rescale_downtime.py`) read of it from the
run's embedded etcd: the tasks' progress (published every second) and the
latest completed checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, decode

ROOT = Path(__file__).resolve().parent.parent
LOCKGATE = str(Path(sys.executable).parent / "lockgate")
KEYS = JobKeys("default", "state")


class Job:
    """`lockgate run state_job:build` at `parallelism`, a checkpoint every 5 s, its
    output in `<work>/out`. With `log`, the run's stderr goes there, each line led by
    the monotonic second it was read at (the logs themselves carry no time)."""

    def __init__(
        self,
        work: Path,
        parallelism: int,
        keys: int,
        value_bytes: int,
        *flags: str,
        job_args: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
        args = {"keys": str(keys), "value_bytes": str(value_bytes), "output": f"file://{work}/out"}
        args.update(job_args or {})
        command = [LOCKGATE, "run", "state_job:build", "--job-id", "state", "-p", str(parallelism)]
        command += ["--checkpoint-interval", "5", "--restart-strategy", "fixed-delay", "--restart-delay", "0"]
        command += ["--restart-attempts", "10", *flags]
        command += [x for name, value in args.items() for x in ("--arg", f"{name}={value}")]
        stderr = subprocess.DEVNULL if log is None else subprocess.PIPE
        self.process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        self.work = work
        if log is not None:
            assert self.process.stderr is not None
            threading.Thread(target=_timestamp_lines, args=(self.process.stderr, log), daemon=True).start()

    def etcd(self) -> Etcd:
        while not (self.work / ".lockgate" / "run.json").exists():
            if self.process.poll() is not None:
                raise SystemExit(f"the run ended with {self.process.returncode}")
            time.sleep(0.1)
        record = json.loads((self.work / ".lockgate" / "run.json").read_text())
        return Etcd(EtcdConfig.from_url(record["etcd"]))


def _timestamp_lines(stream: IO[bytes], log: Path) -> None:
    with open(log, "a") as out:
        for line in stream:
            out.write(f"{time.monotonic():.3f} {line.decode(errors='replace')}")
            out.flush()


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


async def next_checkpoint(etcd: Etcd, after: CompletedCheckpoint | None) -> CompletedCheckpoint:
    """The first checkpoint completed after `after`."""
    while (checkpoint := await latest(etcd)) is None or checkpoint == after:
        await asyncio.sleep(0.25)  # polling etcd
    return checkpoint


async def filled(etcd: Etcd, keys: int) -> CompletedCheckpoint:
    """Waits until every key is in state (the tasks read 1.2 x keys records) and a
    checkpoint taken after that holds it; returns that checkpoint."""
    while (await progress(etcd))[0] < keys * 1.2:
        await asyncio.sleep(0.5)  # polling etcd
    return await next_checkpoint(etcd, await latest(etcd))
