"""Rescale in place: how long no record reaches the sink, and how long until the
job runs at its new parallelism, for `lockgate rescale` against a running
`lockgate run` with ~100 MB and ~1 GB of RocksDB state.

Runs `lockgate run state_job:build -p 2` (every key holds `--value-bytes` of
random bytes in RocksDB; the source makes `--rate` records per second) in a
directory of its own; once every key is in state and a checkpoint holds it,
asks the running driver `--rounds` times for 2 -> 3 and back 3 -> 2 (the
request `lockgate rescale` writes, awaited in-process), each once the previous
one's new tasks wrote records and a checkpoint completed after it. Then
rescales 2 -> 3 once more (not measured) and lets the job run `--settle`
seconds, showing each checkpoint's size (the key groups those restores
range-deleted are compacted away 30 s after them), stops it with a savepoint
and checks its committed output exactly.

The sink is `ArrivalFileSink` (`arrival_sink.py`): FileSink, and each subtask
notes the monotonic time of every batch it writes. Per rescale:

- downtime: the longest gap between two batches written by any subtask, from
  5 s before the request until 5 s after the last new subtask first wrote;
- answered: from the request until the driver's answer `rescaled` (the new
  launch holds the job; its tasks are being started);
- first / all new: from the request until the first, and the last, new subtask
  wrote its first batch;
- where the time went, from the driver's log (-v; each line timed as read) and
  the tasks' marks: the request taken up (`stopping at a checkpoint`), the stop
  checkpoint complete, the driver's answer (old stage ended, new coordinator
  up), the new tasks' Python workers running the job's code, their writers
  made (exchange wired, state restored), their first batch.

The output check (can fail): every committed line is {key, n, count} with
key = n % keys and count = n // keys + 1 (a key's records all come from one
source partition, in order: a lost or repeated state update shows); no n twice;
per source partition the n committed are p, p + 8, p + 16, ... without a gap;
and every launch a rescale started committed records, the last one's too.
Restarts (the driver's "job failed" lines) are counted and shown: a rescale
with one inside its window is not a clean measurement.

    .venv/bin/python bench/rescale_downtime.py [--keys 100000 1000000] [--rounds 3] [--rate 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from arrival_sink import WINDOW_S, Arrival, arrivals, flow, launches, marks
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_requests import (
    await_rescale,
    await_savepoint,
    request_rescale,
    request_savepoint,
)
from state_run import KEYS, Job, filled, latest, next_checkpoint, rate

PARTITIONS = 8  # state_job's source
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Rescale:
    source: int
    target: int
    requested: float  # monotonic
    answered: float
    checkpoint_id: int
    old_launch: int
    new_launch: int


@dataclass(frozen=True)
class Measured:
    downtime: float
    answered: float
    first_new: float
    all_new: float
    steps: dict[str, float]
    restarts: int  # the driver's "job failed" lines from the request until the new launch settled


async def rescale(etcd: Etcd, directory: Path, source: int, target: int) -> Rescale:
    old_launch = max(launches(directory))
    requested = time.monotonic()
    request_id = await request_rescale(etcd, KEYS, target, expires_in_s=REQUEST_TIMEOUT_S)
    result = await await_rescale(etcd, KEYS, request_id, REQUEST_TIMEOUT_S)
    answered = time.monotonic()
    if result.status != "rescaled" or result.checkpoint_id is None:
        raise SystemExit(f"rescale {source} -> {target}: {result.status}: {result.reason}")
    # Settled: every new subtask wrote, and a checkpoint of the new launch completed.
    while not (new := [n for n, s in launches(directory).items() if n > old_launch and len(s) == target]):
        await asyncio.sleep(0.25)  # polling the arrivals
    after = await latest(etcd)
    while after is None or after.checkpoint_id <= result.checkpoint_id:
        after = await next_checkpoint(etcd, after)
    return Rescale(source, target, requested, answered, result.checkpoint_id, old_launch, new[0])


def log_times(log: Path, pattern: str, after: float) -> list[float]:
    """When the lines matching `pattern` read after `after` were read."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        at, _, text = line.partition(" ")
        try:
            when = float(at)
        except ValueError:
            continue
        if when >= after and re.search(pattern, text):
            times.append(when)
    return times


def log_time(log: Path, pattern: str, after: float) -> float:
    """When the first line matching `pattern` read after `after` was read."""
    if times := log_times(log, pattern, after):
        return times[0]
    raise SystemExit(f"no driver log line matching {pattern!r} after {after:.3f} (see {log})")


def measure(r: Rescale, found: list[Arrival], directory: Path, log: Path, driver_pid: int) -> Measured:
    records = flow(found, r.requested, r.old_launch, r.new_launch)
    all_new = r.requested + records.all_new
    taken_up = log_time(log, r"rescale \S+: stopping at a checkpoint", r.requested)
    stopped = log_time(log, rf"checkpoint {r.checkpoint_id} complete", taken_up)
    answer = log_time(log, r"rescaled to parallelism", stopped)
    task_marks = [(at, what) for at, pid, what in marks(directory) if pid != driver_pid and at > stopped]
    built = max(sorted(at for at, what in task_marks if what == "graph built")[: r.target])
    writers = [at for at, what in task_marks if what.startswith(f"writer {r.new_launch} ")]
    steps = {
        "request taken up": taken_up - r.requested,
        "stop checkpoint": stopped - taken_up,
        "old stage ends, new launch answers": answer - stopped,
        "new tasks run the job's code": built - answer,
        "exchange wired, state restored": max(writers) - built,
        "first batch written": all_new - max(writers),
        "(last old batch after request)": records.last_old,
    }
    restarts = [at for at in log_times(log, "job failed", r.requested) if at <= all_new + WINDOW_S]
    answered = r.answered - r.requested
    return Measured(records.downtime, answered, records.first_new, records.all_new, steps, len(restarts))


def check_output(out: Path, keys: int, must_commit: set[int]) -> str:
    """Raises SystemExit naming the first inexact thing in the committed output;
    each launch of `must_commit` must have committed records."""
    line = re.compile(rb'\{"key":(\d+),"n":(\d+),"count":(\d+)\}\n')
    name = re.compile(r"~\d+-(\d+)-[0-9a-f]{8}-\d+-chk\d+\.jsonl$")
    seen = bytearray()
    by_launch: Counter[int] = Counter()
    for path in sorted(out.iterdir()):
        if path.name.startswith((".", "_")):
            continue
        launch = name.search(path.name)
        if launch is None:
            raise SystemExit(f"{path}: not a committed FileSink file")
        data = path.read_bytes()
        records = 0
        for match in line.finditer(data):
            key, n, count = (int(x) for x in match.groups())
            if key != n % keys or count != n // keys + 1:
                raise SystemExit(
                    f"{path}: record n={n} key={key} count={count}, expected count {n // keys + 1}"
                )
            if n >= len(seen):
                seen.extend(bytes(max(n + 1 - len(seen), len(seen))))
            seen[n] += 1
            records += 1
        lines = data.count(b"\n")
        if records != lines:
            raise SystemExit(f"{path}: {lines - records} line(s) are not state_job records")
        by_launch[int(launch.group(1))] += records
    if max(seen, default=0) > 1:
        raise SystemExit(f"record n={seen.index(max(seen))} committed {max(seen)} times")
    for p in range(PARTITIONS):
        column = seen[p::PARTITIONS]
        gap = column.find(0)
        if gap != -1 and column.count(0) != len(column) - gap:
            raise SystemExit(f"partition {p}: record n={p + PARTITIONS * gap} missing, later ones committed")
    if not must_commit <= set(by_launch):
        raise SystemExit(
            f"committed records per launch: {dict(by_launch)}; launches that must have: {must_commit}"
        )
    total = sum(by_launch.values())
    return f"{total:,} records exact over launches {sorted(by_launch)}"


async def sizes_after(etcd: Etcd, since: float, seconds: float) -> list[tuple[float, int, int]]:
    """The checkpoints completed from `since` (monotonic) until `seconds` after it:
    (seconds after `since`, id, bytes)."""
    found = []
    after = await latest(etcd)
    while time.monotonic() - since < seconds:
        after = await next_checkpoint(etcd, after)
        found.append((time.monotonic() - since, after.checkpoint_id, after.bytes))
    return found


async def run(
    work: Path, keys: int, value_bytes: int, rounds: int, records_per_s: int, settle_s: float
) -> None:
    directory, log = work / "arrivals", work / "driver.log"
    directory.mkdir()
    job_args = {"arrivals": str(directory), "rate": str(records_per_s)}
    job = Job(work, 2, keys, value_bytes, "-v", job_args=job_args, log=log)
    done: list[Rescale] = []
    async with job.etcd() as etcd:
        checkpoint = await filled(etcd, keys)
        steady = await rate(etcd)
        print(
            f"state {checkpoint.bytes / 1e6:,.0f} MB in checkpoint {checkpoint.checkpoint_id} "
            f"(took {checkpoint.duration_ms} ms); {steady:,.0f} records/s at P = 2",
            flush=True,
        )
        for _ in range(rounds):
            done.append(await rescale(etcd, directory, 2, 3))
            done.append(await rescale(etcd, directory, 3, 2))
        # One more 2 -> 3, not measured: its restores range-delete key groups (a 3 -> 2
        # restore deletes none), which the settle's checkpoints show compacted away.
        last = await rescale(etcd, directory, 2, 3)
        for seconds, checkpoint_id, size in await sizes_after(etcd, last.answered, settle_s):
            print(
                f"{seconds:5.1f} s after the last rescale: checkpoint {checkpoint_id}, {size / 1e6:,.0f} MB"
            )
        request_id = await request_savepoint(etcd, KEYS, stop=True, expires_in_s=REQUEST_TIMEOUT_S)
        await await_savepoint(etcd, KEYS, request_id, REQUEST_TIMEOUT_S)
    job.process.wait()
    found = arrivals(directory)
    results = [(r, measure(r, found, directory, log, job.process.pid)) for r in done]
    must_commit = {r.new_launch for r in done} | {last.new_launch, max(launches(directory))}
    print(f"output: {check_output(work / 'out', keys, must_commit)}", flush=True)
    failures = [line for line in log.read_text(errors="replace").splitlines() if "job failed" in line]
    print(f"restarts during the run: {len(failures)}", *failures, sep="\n  ", flush=True)
    report(results)


def report(results: list[tuple[Rescale, Measured]]) -> None:
    print("| rescale | downtime (s) | answered (s) | first new batch (s) | all new subtasks (s) | restarts |")
    print("|---|---:|---:|---:|---:|---:|")
    for r, m in results:
        times = (m.downtime, m.answered, m.first_new, m.all_new)
        print(f"| {r.source} → {r.target} | " + " | ".join(f"{t:.2f}" for t in times) + f" | {m.restarts} |")
    for source, target in ((2, 3), (3, 2)):
        mine = [m for r, m in results if (r.source, r.target) == (source, target)]
        downtime = statistics.median(m.downtime for m in mine)
        rest = [
            statistics.median(getattr(m, field) for m in mine)
            for field in ("answered", "first_new", "all_new")
        ]
        print(
            f"| **{source} → {target}, median of {len(mine)}** | **{downtime:.2f}** | "
            + " | ".join(f"{t:.2f}" for t in rest)
            + f" | {sum(m.restarts for m in mine)} |"
        )
        for step in mine[0].steps:
            print(f"    {step}: {statistics.median(m.steps[step] for m in mine):.2f} s (median)")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="rescales 2 -> 3 -> 2 per state size")
    parser.add_argument("--rate", type=int, default=50_000, help="the source's records per second")
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="seconds the job runs on after the last rescale, its checkpoints' sizes shown "
        "(the key groups a restore range-deleted are compacted 30 s after it)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each run's directory (its log and arrivals)"
    )
    arguments = parser.parse_args()
    for keys in arguments.keys:
        if keys % PARTITIONS:
            parser.error(f"--keys {keys}: must be a multiple of {PARTITIONS} (the output check relies on it)")
        work = Path(tempfile.mkdtemp(prefix="lockgate-rescale-bench-"))
        print(f"{keys:,} keys x {arguments.value_bytes} bytes in {work}", flush=True)
        try:
            asyncio.run(
                run(work, keys, arguments.value_bytes, arguments.rounds, arguments.rate, arguments.settle)
            )
        finally:
            if not arguments.keep:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
