"""The engine on Spark: throughput and latency of a keyed running sum.

2M generated records over 100k keys, RocksDB state, P = 2 on `local[2]`,
exactly-once with a checkpoint every 5 s, then the same without periodic
checkpoints (only the final one that commits the output), then with the
sources held to 50k records/s in all. Records are stamped
at the source; the sink measures source-to-sink latency (before commit: the
output becomes visible when the next checkpoint completes).

    .venv/bin/python bench/engine_throughput.py [--count N] [--keys K] [--parallelism P] [--rows ROW ...]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import secrets
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.channels import DEFAULT_CHANNEL_CAPACITY
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.serving import PortRange
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage, local_session
from plots import latency_plot


class InFlightRecords(logging.Handler):
    """The records in flight each unaligned checkpoint kept, as the coordinator logs them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "records in flight (unaligned)" in str(record.msg) and isinstance(record.args, tuple):
            self.counts.append(int(record.args[2]))

    def summary(self) -> str:
        if not self.counts:
            return ""
        median, most = statistics.median(self.counts), max(self.counts)
        return f", {len(self.counts)} checkpoints with records in flight: median {median:,.0f}, most {most:,}"


def measure(
    spark: object,
    etcd: EtcdConfig,
    work: Path,
    args: argparse.Namespace,
    interval: float | None,
    label: str,
    rate: float | None = None,
    metrics: bool = False,
    unaligned_after_s: float | None = None,
) -> tuple[float, float, float]:
    """Runs the job once; returns its records/s and latency p50 and p99 in ms."""
    samples = work / label / "samples"
    samples.mkdir(parents=True)
    spec = JobSpec(
        entrypoint="engine_job:build",
        keys=JobKeys("bench", f"{label}-{work.name}"),  # repeated rows must not resume each other
        parallelism=args.parallelism,
        state=StateConfig("rocksdb", work / label / "local", 128),
        control_plane=etcd,
        secret=secrets.token_bytes(32),
        args=(
            ("count", str(args.count)),
            ("keys", str(args.keys)),
            ("output", f"file://{work}/{label}/out"),
            ("samples", str(samples)),
            ("rate", "" if rate is None else str(rate)),
        ),
        bounded=True,
        channel_capacity=args.channel_capacity,
        metrics_ports=METRICS_PORTS if metrics else None,
        unaligned_after_s=unaligned_after_s,
    )
    storage = CheckpointStorage(f"file://{work}/{label}/checkpoints")
    config = CheckpointConfig(interval_s=interval, timeout_s=600)
    in_flight = InFlightRecords()
    coordinator_log = logging.getLogger("lockgate.runtime.coordination.coordinator")
    coordinator_log.setLevel(logging.INFO)
    coordinator_log.addHandler(in_flight)
    done = threading.Event()
    scraper = threading.Thread(target=scrape_every_second, args=(done,), daemon=True)
    if metrics:
        scraper.start()
    started = time.monotonic()
    try:
        master = JobMaster(spec, BarrierStage(spark), storage, config)  # type: ignore[arg-type]
        asyncio.run(master.run(restart_strategy("none")))
    finally:
        done.set()
        coordinator_log.removeHandler(in_flight)
    wall = time.monotonic() - started
    reports = [json.loads(p.read_text()) for p in samples.glob("*.json")]
    count = sum(r["count"] for r in reports)
    assert count == args.count, f"{count} records reached the sinks, {args.count} expected"
    span = max(r["last"] for r in reports) - min(r["first"] for r in reports)
    latencies = sorted(ms * 1000 for r in reports for ms in r["latencies"])
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"{label:>16}: {count / span:10,.0f} records/s over {span:5.1f} s (wall {wall:5.1f} s incl. start), "
        f"latency p50 {p50:7.1f} ms, p99 {p99:7.1f} ms{in_flight.summary()}",
        flush=True,
    )
    return count / span, p50, p99


CURVE_FRACTIONS = (0.5, 0.7, 0.8, 0.9, 0.95)


def latency_curve(spark: object, etcd: EtcdConfig, work: Path, args: argparse.Namespace) -> None:
    """Latency against throughput: once at full speed, then with the sources held to
    fractions of that rate; the points go to a plot in docs/img."""
    full = measure(spark, etcd, work / "full", args, 5.0, "curve-full")
    points = [(1.0, *full)]
    for fraction in CURVE_FRACTIONS:
        label = f"curve-{round(fraction * 100)}pct"
        held = measure(spark, etcd, work / label, args, 5.0, label, rate=fraction * full[0])
        points.append((fraction, *held))
    print("| sources held to | records/s | latency p50 | latency p99 |\n|---:|---:|---:|---:|")
    for fraction, rate, p50, p99 in sorted(points):
        held = "unlimited" if fraction == 1.0 else f"{fraction:.0%} of full speed"
        print(f"| {held} | {rate:,.0f} | {p50:.1f} ms | {p99:.1f} ms |")
    plot = Path(__file__).resolve().parent.parent / "docs" / "img" / "latency_vs_throughput.svg"
    plot.write_text(latency_plot([(rate, p50, p99) for _, rate, p50, p99 in sorted(points)]))
    print(f"plot: {plot}")


METRICS_PORTS = PortRange(19250, 19259)


def scrape_every_second(done: threading.Event) -> None:
    """What a Prometheus scraping every task each second costs the tasks."""
    while not done.wait(1.0):
        for port in range(METRICS_PORTS.first, METRICS_PORTS.last + 1):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    response.read()
            except OSError:
                continue


ROWS = (
    "checkpoints-5s",
    "checkpoints-5s-metrics",
    "final-only",
    "rate-50k-5s",
    "checkpoints-5s-unaligned",
    "checkpoints-1s",
    "checkpoints-1s-unaligned",
)


def tree_cpu_s() -> float:
    """CPU seconds (user and system) used so far by this process and every process
    below it (the Spark JVM, the Python workers), with the children they reaped."""
    parent_of: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on
        parent_of[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parent_of.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def summarize(results: list[tuple[str, float, float]]) -> None:
    """Each row's median over its runs, of records/s and of CPU seconds per million
    records (all of the benchmark's processes: less sensitive than records/s to
    what else the machine does); for rows run alternately (A B A B ...), the ratio
    of each B to the A just before it: pairs close in time share the machine's
    state, so their ratio spreads less than the rows' runs do."""
    by_row: dict[str, list[tuple[float, float]]] = {}
    for row, rate, cpu in results:
        by_row.setdefault(row, []).append((rate, cpu))
    for row, runs in by_row.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{row:>26}: median {rate:10,.0f} records/s, {cpu:5.2f} CPU s per 1M records, {len(runs)} runs")
    rows = list(by_row)
    if len(rows) != 2:
        return
    first, second = rows
    pairs = [(a, b) for a, b in itertools.pairwise(results) if (a[0], b[0]) == (first, second)]
    for what, index in (("records/s", 1), ("CPU per record", 2)):
        ratios = [b[index] / a[index] for a, b in pairs]
        if ratios:
            shown = ", ".join(f"{r:.3f}" for r in ratios)
            print(f"{what}, {second} / {first}, each pair: {shown}; median {statistics.median(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--curve", action="store_true", help="latency against throughput, plotted")
    parser.add_argument(
        "--channel-capacity", type=int, default=DEFAULT_CHANNEL_CAPACITY, help="frames of credit per channel"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = EtcdServer(work / "etcd")
        server.start()
        spark = local_session(args.parallelism, "lockgate-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            etcd = EtcdConfig.from_url(server.endpoint)
            runs = {
                "checkpoints-5s": lambda w: measure(spark, etcd, w, args, 5.0, "checkpoints-5s"),
                # Every task serving its metrics, scraped each second.
                "checkpoints-5s-metrics": lambda w: measure(
                    spark, etcd, w, args, 5.0, "checkpoints-5s-metrics", metrics=True
                ),
                "final-only": lambda w: measure(spark, etcd, w, args, None, "final-only"),
                # Below saturation, latency is the pipeline's own, not time spent queued.
                "rate-50k-5s": lambda w: measure(spark, etcd, w, args, 5.0, "rate-50k-5s", rate=50_000),
                # Every checkpoint unaligned: barriers overtake, records in flight are copied.
                "checkpoints-5s-unaligned": lambda w: measure(
                    spark, etcd, w, args, 5.0, "checkpoints-5s-unaligned", unaligned_after_s=0.0
                ),
                # A checkpoint a second: what is paid per checkpoint shows five times as often.
                "checkpoints-1s": lambda w: measure(spark, etcd, w, args, 1.0, "checkpoints-1s"),
                "checkpoints-1s-unaligned": lambda w: measure(
                    spark, etcd, w, args, 1.0, "checkpoints-1s-unaligned", unaligned_after_s=0.0
                ),
            }
            if args.curve:
                latency_curve(spark, etcd, work / "curve", args)
                return
            results: list[tuple[str, float, float]] = []
            for n, row in enumerate(args.rows):  # a row may be repeated, each run in its own directory
                cpu = tree_cpu_s()
                rate, _, _ = runs[row](work / str(n))
                cpu_per_million = (tree_cpu_s() - cpu) / args.count * 1e6
                print(f"{row:>26}: {cpu_per_million:5.2f} CPU s per million records", flush=True)
                results.append((row, rate, cpu_per_million))
            summarize(results)
        finally:
            spark.stop()
            server.stop()


if __name__ == "__main__":
    main()
