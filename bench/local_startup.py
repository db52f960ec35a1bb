"""`lockgate run --local` beside `lockgate run` on Spark: how long from the command's
start to the job's first record, and to its end.

Each variant runs a small bounded job (bench/startup_job.py: 1,000 generated
records at parallelism 2, its first record stamped with the wall-clock time)
once to warm up (compiled modules, the embedded etcd's data directory), then
`--runs` times with `--fresh` in the same directory, as a job's author reruns
it. Reports the median and the spread of each.

The runs may write Python's bytecode cache, as an author's Python does by
default, whatever this shell says: with PYTHONDONTWRITEBYTECODE set (some shells
and images set it) an editable install's modules are compiled from source at
every run, about 0.2 s of CPU that an author's rerun does not pay.

    .venv/bin/python bench/local_startup.py [--runs N] [--variant local|spark]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
LOCKGATE = str(Path(sys.executable).parent / "lockgate")


def one_run(work: Path, variant: list[str], fresh: bool) -> tuple[float, float]:
    """Seconds from the command's start to the first record, and to its exit."""
    first = work / "first-record"
    first.unlink(missing_ok=True)
    command = [
        LOCKGATE,
        "run",
        f"{BENCH / 'startup_job.py'}:build",
        "--job-id",
        "startup",
        "-p",
        "2",
        "--bounded",
        "--arg",
        f"first={first}",
        "--arg",
        f"output=file://{work}/out-{time.monotonic_ns()}",
        *variant,
        *(["--fresh"] if fresh else []),
    ]
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    started = time.time()
    result = subprocess.run(command, cwd=work, env=environment, capture_output=True, text=True, check=False)
    ended = time.time()
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return float(first.read_text()) - started, ended - started


def measure(variant: list[str], runs: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="lockgate-startup-") as directory:
        work = Path(directory)
        one_run(work, variant, fresh=False)  # warm-up: not counted
        timings = [one_run(work, variant, fresh=True) for _ in range(runs)]
    return [first for first, _ in timings], [total for _, total in timings]


VARIANTS = {
    "local": ("`lockgate run --local`", ["--local"]),
    "spark": ("`lockgate run` (Spark, local[2])", []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variant", choices=sorted(VARIANTS), action="append", help="(default: both)")
    args = parser.parse_args()
    print("| variant | start to first record, median (min-max) | start to exit, median |")
    print("|---|---:|---:|")
    for label, variant in (VARIANTS[name] for name in args.variant or VARIANTS):
        first, total = measure(variant, args.runs)
        spread = f"{min(first):.2f}-{max(first):.2f}"
        print(f"| {label} | {statistics.median(first):.2f} s ({spread}) | {statistics.median(total):.2f} s |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
