"""Lockgate beside its peers on one workload, in one run: the keyed running count.

COUNT records (n, k, v) over KEYS keys, written once as CSV and as JSON-lines
partitions of the same records; per key a (count, sum of v) in RocksDB; one
output record per input record, (k, n, count, sum); a checkpoint every 5 s,
exactly-once; P subtasks. Run one after another on that input:

- Lockgate: `lockgate run keyed_count_job:build --bounded` (LogSource of JSON
  lines → FileSink), as a user runs it, embedded etcd and Spark `local[P]`;
- Flink SQL (apache-flink, its own virtualenv): an OVER aggregation into CSV
  files, and a GROUP BY into the blackhole connector;
- Spark Structured Streaming (pyspark with pandas and pyarrow, its own
  virtualenv): `transformWithState`, the row API, into CSV files.

Every output is checked against the reference: each n exactly once, under its
key, and per key the counts 1, 2, ... with each sum the sum of v of the records
counted so far (in whatever order the system processed them). The blackhole
query writes nothing, so it is timed only. Prints one Markdown table with the
ratios to Flink SQL's OVER aggregation; `--write-docs` puts it in
docs/benchmarks.md between the markers of its section.

    .venv/bin/python bench/peers/keyed_count.py [--count N] [--keys K] [--parallelism P]
                                                [--systems lockgate,flink-over,flink-groupby,spark]
                                                [--write-docs]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lockgate.runtime import read_committed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from peers.virtualenvs import peer_python

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LOCKGATE = Path(sys.executable).parent / "lockgate"
PARTITIONS = 8
DOCS_START = "<!-- peers/keyed_count.py: start -->"
DOCS_END = "<!-- peers/keyed_count.py: end -->"
Row = tuple[int, int, int, int]  # k, n, count, sum
NONE, TIMES = "\u2013", "\u00d7"  # the table's dash and multiplication sign


def key_of(n: int, keys: int) -> int:
    return n * 2654435761 % 2**32 % keys


def value_of(n: int) -> int:
    return n % 1000


def write_input(work: Path, count: int, keys: int) -> None:
    """PARTITIONS files of consecutive n each, in both formats."""
    for kind in ("csv", "jsonl"):
        (work / kind).mkdir()
    per_file = -(-count // PARTITIONS)
    for p in range(PARTITIONS):
        numbers = range(p * per_file, min(count, (p + 1) * per_file))
        rows = [(n, key_of(n, keys), value_of(n)) for n in numbers]
        with open(work / "csv" / f"part-{p}.csv", "w") as out:
            out.writelines(f"{n},{k},{v}\n" for n, k, v in rows)
        with open(work / "jsonl" / f"part-{p}.jsonl", "w") as out:
            out.writelines(f'{{"n":{n},"k":{k},"v":{v}}}\n' for n, k, v in rows)


def verify(rows: Iterable[Row], count: int, keys: int) -> None:
    """Each n exactly once, under its key; per key the counts run 1, 2, ... and each
    sum is the sum of v over the records counted so far."""
    seen = bytearray(count)
    by_key: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for k, n, counted, total in rows:
        if not 0 <= n < count or seen[n]:
            raise AssertionError(f"record {n} is not in the input or was output twice")
        seen[n] = 1
        if k != key_of(n, keys):
            raise AssertionError(f"record {n} was output under key {k}, not {key_of(n, keys)}")
        by_key[k].append((counted, n, total))
    if (missing := count - sum(seen)) != 0:
        raise AssertionError(f"{missing} records were never output, e.g. {seen.index(0)}")
    for k, entries in by_key.items():
        entries.sort()
        total = 0
        for expected, (counted, n, reported) in enumerate(entries, 1):
            total += value_of(n)
            if counted != expected or reported != total:
                raise AssertionError(
                    f"key {k}: record {n} has count {counted} and sum {reported}; "
                    f"expected {expected} and {total}"
                )


@dataclass(frozen=True)
class Result:
    system: str
    records_per_s: float  # over the job's own running time, without the start-up
    wall_s: float  # the command, start to exit
    startup_s: float | None  # the command's start to its first record read
    verified: bool


class SystemFailedError(RuntimeError):
    """A system's run failed or ran out of time: its row says so, and the others still run."""


TIMEOUT_S = 900  # a peer that restarts in a loop (Flink does, by default) must not hang the run


def _run(command: list[str], **kwargs: object) -> tuple[subprocess.CompletedProcess[str], float, float]:
    started_at = time.time()
    started = time.monotonic()
    try:
        done = subprocess.run(  # type: ignore[call-overload]
            command, capture_output=True, text=True, check=False, timeout=TIMEOUT_S, **kwargs
        )
    except subprocess.TimeoutExpired:
        raise SystemFailedError(f"did not finish in {TIMEOUT_S} s") from None
    if done.returncode != 0:
        print(done.stderr[-4000:], file=sys.stderr)
        raise SystemFailedError(f"exited with {done.returncode} (its error output is above the table)")
    return done, started_at, time.monotonic() - started


def run_lockgate(work: Path, args: argparse.Namespace) -> Result:
    run_dir = work / "lockgate"
    samples = run_dir / "samples"
    samples.mkdir(parents=True)
    command = [
        str(LOCKGATE), "run", "keyed_count_job:build",
        "--parallelism", str(args.parallelism),
        "--bounded",
        "--checkpoint-interval", "5s",
        "--state-backend", "rocksdb",
        "--arg", f"input=file://{work}/jsonl",
        "--arg", f"output=file://{run_dir}/out",
        "--arg", f"samples={samples}",
        *(["--master", args.lockgate_master] if args.lockgate_master else []),
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(HERE)}
    _, started_at, wall = _run(command, cwd=run_dir, env=environment)
    times = [json.loads(p.read_text()) for p in samples.glob("*.json")]
    first, last = min(t["first"] for t in times), max(t["last"] for t in times)
    rows = ((r["k"], r["n"], r["count"], r["sum"]) for r in read_committed(f"file://{run_dir}/out"))
    verify(rows, args.count, args.keys)
    return Result("Lockgate", args.count / (last - first), wall, first - started_at, True)


def _csv_rows(directory: Path, columns: Callable[[list[str]], Row]) -> Iterator[Row]:
    """Every committed CSV file's rows: hidden files (in progress) and Spark's
    `_spark_metadata` are not output."""
    for path in sorted(directory.rglob("*")):
        hidden = any(part.startswith((".", "_")) for part in path.relative_to(directory).parts)
        if path.is_file() and not hidden and not path.name.endswith(".crc"):
            with open(path, newline="") as rows:
                yield from (columns(row) for row in csv.reader(rows))


def _four_ints(row: list[str]) -> Row:
    k, n, counted, total = (int(field) for field in row)
    return k, n, counted, total


def run_flink(work: Path, args: argparse.Namespace, mode: str) -> Result:
    output = work / f"flink-{mode}"
    script = HERE / "flink_keyed_count.py"
    command = [
        str(peer_python("flink")), str(script), mode, str(work / "csv"), str(args.parallelism), str(output),
    ]  # fmt: skip
    done, _, wall = _run(command)
    runtime = json.loads(done.stdout.strip().splitlines()[-1])["runtime_s"]
    if mode == "over":
        verify(_csv_rows(output, _four_ints), args.count, args.keys)
    label = "Flink SQL, OVER aggregation → CSV files" if mode == "over" else "Flink SQL, GROUP BY → blackhole"
    return Result(label, args.count / runtime, wall, None, mode == "over")


def run_spark(work: Path, args: argparse.Namespace) -> Result:
    output = work / "spark-out"
    script = HERE / "spark_keyed_count.py"
    command = [
        str(peer_python("spark")), str(script), str(work / "csv"), str(args.parallelism),
        str(output), str(work / "spark-checkpoints"),
    ]  # fmt: skip
    done, _, wall = _run(command)
    runtime = json.loads(done.stdout.strip().splitlines()[-1])["runtime_s"]
    verify(_csv_rows(output, _four_ints), args.count, args.keys)
    return Result("Spark SS, transformWithState (rows) → CSV files", args.count / runtime, wall, None, True)


RUNNERS: dict[str, Callable[[Path, argparse.Namespace], Result]] = {
    "lockgate": run_lockgate,
    "flink-over": lambda work, args: run_flink(work, args, "over"),
    "flink-groupby": lambda work, args: run_flink(work, args, "groupby"),
    "spark": run_spark,
}


def table(results: list[Result], args: argparse.Namespace) -> str:
    reference = next((r for r in results if r.system.startswith("Flink SQL, OVER")), None)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO, check=False
    )
    lines = [
        f"{datetime.date.today().isoformat()}, {machine}, at {commit.stdout.strip()}: "
        f"{args.count:,} records, {args.keys:,} keys, P = {args.parallelism}, one run each.",
        "",
        "| system | records/s | ÷ Flink SQL OVER | wall incl. start | start-up to first record "
        "| output verified |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = f"{r.records_per_s / reference.records_per_s:.2f}" if reference else NONE
        wall_ratio = f" ({r.wall_s / reference.wall_s:.2f}{TIMES})" if reference else ""
        startup = NONE if r.startup_s is None else f"{r.startup_s:.1f} s"
        lines.append(
            f"| {r.system} | {r.records_per_s:,.0f} | {ratio} | {r.wall_s:.1f} s{wall_ratio} | {startup} | "
            f"{'yes' if r.verified else 'no (nothing written)'} |"
        )
    return "\n".join(lines)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def write_docs(text: str) -> None:
    docs = REPO / "docs" / "benchmarks.md"
    content = docs.read_text()
    start, end = content.index(DOCS_START) + len(DOCS_START), content.index(DOCS_END)
    docs.write_text(f"{content[:start]}\n{text}\n{content[end:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--lockgate-master",
        help="Lockgate's Spark master (default local[P]); local-cluster[P,1,1024]: executors in own JVMs",
    )
    parser.add_argument("--systems", default=",".join(RUNNERS), help=f"of {', '.join(RUNNERS)}")
    parser.add_argument("--write-docs", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    systems = args.systems.split(",")
    if unknown := set(systems) - set(RUNNERS):
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(RUNNERS)}")
    for peer in {system.split("-")[0] for system in systems} - {"lockgate"}:
        peer_python(peer)  # installs happen before anything is timed
    with tempfile.TemporaryDirectory(prefix="lockgate-peers-") as tmp:
        work = Path(tmp)
        write_input(work, args.count, args.keys)
        results: list[Result] = []
        failures: list[str] = []
        for system in systems:
            try:
                result = RUNNERS[system](work, args)
            except SystemFailedError as failure:
                print(f"{system}: {failure}", flush=True)
                failures.append(f"{system}: {failure}")
                continue
            print(
                f"{result.system}: {result.records_per_s:,.0f} records/s, {result.wall_s:.1f} s", flush=True
            )
            results.append(result)
    text = table(results, args) + "".join(f"\n\nFailed: {failure}." for failure in failures)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
