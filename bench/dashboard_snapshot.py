"""The picture in docs/operations.md: the dashboard's main panels for a word
count at P = 2, read from a real Prometheus.

Lines are appended to a log at a steady rate; after 25 s a burst of 300,000
lines lands at once. The plot shows the source's lag jump and drain, the
job's intake rising to its maximum, backpressure at the exchange while it
catches up, and checkpoints completing throughout.

    .venv/bin/pip install -e '.[docs]'    # matplotlib
    .venv/bin/python bench/dashboard_snapshot.py [--out docs/img/dashboard.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.metrics.serving import PortRange
from lockgate.runtime.spark import local_session

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.monitoring.prometheus import Prometheus  # noqa: E402
from tests.runtime.metrics.metered_job import MeteredJob  # noqa: E402

KEYS = JobKeys("default", "wordcount")
TASK_PORTS = PortRange(19350, 19351)
WORDS = [f"w{i}" for i in range(5000)]
SECONDS, BURST_AT, BURST_LINES, STEADY_PER_S = 60, 20, 300_000, 5_000
PANELS = {
    "Records in per second": 'sum by (vertex) (rate(lockgate_records_in_total{vertex!="out"}[5s]))',
    "Source lag (bytes)": "sum(lockgate_source_lag_bytes)",
    "Backpressure (share of time)": "max by (vertex) (rate(lockgate_backpressured_seconds_total[5s]))",
    "Time since the last completed checkpoint (s)": (
        "time() - lockgate_last_checkpoint_completed_timestamp_seconds"
    ),
}


def append_lines(log: Path, stop: threading.Event) -> None:
    rng = random.Random(7)

    def write(count: int) -> None:
        text = "".join(
            json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(3, 10)))}) + "\n"
            for _ in range(count)
        )
        with open(log, "a") as out:
            out.write(text)

    started = time.monotonic()
    burst_done = False
    while not stop.wait(0.1):
        write(STEADY_PER_S // 10)
        if not burst_done and time.monotonic() - started >= BURST_AT:
            write(BURST_LINES)
            burst_done = True


def query_range(prometheus: Prometheus, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "1"})
    with urllib.request.urlopen(f"http://127.0.0.1:{prometheus.port}/api/v1/query_range?{params}") as r:
        return list(json.loads(r.read())["data"]["result"])


async def run_job(work: Path, etcd: EtcdConfig, spark: Any) -> tuple[float, float, Prometheus]:
    (work / "lines").mkdir()
    log = work / "lines" / "part-0.jsonl"
    log.touch()
    (work / "lines" / "part-1.jsonl").touch()
    job = MeteredJob.start(
        spark,
        etcd,
        KEYS,
        work,
        "examples.wordcount:build",
        {"input": f"file://{work}/lines", "output": f"file://{work}/out"},
        task_ports=TASK_PORTS,
        interval_s=2.0,
    )
    prometheus = Prometheus.start(
        [f"127.0.0.1:{p}" for p in (job.driver.port, *job.task_port_numbers())], work
    )
    stop = threading.Event()
    appender = threading.Thread(target=append_lines, args=(log, stop))
    started = time.time()
    appender.start()
    try:
        await asyncio.sleep(SECONDS)  # the length of the recording
        stop.set()
        appender.join()
        async with Etcd(etcd) as client:
            await job.stop_with_savepoint(client)
    finally:
        stop.set()
        job.close()
    return started, started + SECONDS, prometheus


def plot(prometheus: Prometheus, start: float, end: float, out: Path) -> None:
    figure, axes = plt.subplots(2, 2, figsize=(12, 6.5), sharex=True)
    for ax, (title, expr) in zip(axes.flat, PANELS.items(), strict=True):
        for series in query_range(prometheus, expr, start, end):
            xs = [float(t) - start for t, _ in series["values"]]
            ys = [float(v) for _, v in series["values"]]
            ax.plot(xs, ys, label=series["metric"].get("vertex", "_"), linewidth=1.4)
        ax.set_title(title, fontsize=10)
        ax.axvline(BURST_AT, color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
        if any(not str(line.get_label()).startswith("_") for line in ax.get_lines()):
            ax.legend(fontsize=8, loc="upper right")
    for ax in axes[1]:
        ax.set_xlabel(f"seconds (dotted: {BURST_LINES:,} lines appended at once)")
    figure.suptitle("Lockgate dashboard panels: word count at P = 2, from Prometheus", fontsize=11)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "dashboard.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = EtcdServer(work / "etcd")
        server.start()
        spark = local_session(2, "lockgate-dashboard")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            start, end, prometheus = asyncio.run(run_job(work, EtcdConfig.from_url(server.endpoint), spark))
            try:
                plot(prometheus, start, end, args.out)
            finally:
                prometheus.stop()
        finally:
            spark.stop()
            server.stop()


if __name__ == "__main__":
    main()
