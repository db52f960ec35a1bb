"""Checkpoints under sustained backpressure: aligned, unaligned, and aligned with a
timeout, on Spark (`local[P]`, RocksDB state, the TCP exchange).

The keyed running sum of engine_job.py, its sources held to `--rate` records/s
in all, into a sink throttled to half that (bench/backpressure_job.py): the
exchange into the sum stays full for the whole run. Per configuration, from the
checkpoints completed before the final one: checkpoint duration p50/p99,
checkpoints aborted, channel state per checkpoint (records, bytes); and the
latency of sampled records from their source to their commit (the completion of
the checkpoint whose epoch holds them, when exactly-once output is visible).
Each configuration runs with frame sizing (the default, which keeps what waits
in a channel to ~50 ms) and without it (full frames: the most in flight).

    .venv/bin/python bench/unaligned_checkpoints.py [--seconds 30] [--rate 4000] [--timeout 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage, local_session


@dataclass
class Outcomes:
    completions: list[CompletedCheckpoint] = field(default_factory=list)
    aborts: int = 0

    def completed(self, checkpoint: CompletedCheckpoint) -> None:
        self.completions.append(checkpoint)

    def aborted(self, trigger: Trigger, reason: str) -> None:
        self.aborts += 1

    def restarted(self) -> None:
        raise AssertionError("the benchmark's job restarted")


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def _channel_state(completed: CompletedCheckpoint) -> tuple[int, int]:
    storage = CheckpointStorage(completed.path)
    metadata = read_metadata(storage, storage.root)
    handles = [s.channel for v in metadata.vertices.values() for s in v.subtasks if s.channel is not None]
    return sum(h.records for h in handles), sum(h.file.size for h in handles)


def run(
    spark: object,
    etcd: EtcdConfig,
    work: Path,
    args: argparse.Namespace,
    label: str,
    after_s: float | None,
    sizing: bool,
) -> dict[str, object]:
    samples = work / "samples"
    samples.mkdir(parents=True)
    sink_rate = args.rate / 2
    spec = JobSpec(
        entrypoint="backpressure_job:build",
        keys=JobKeys("bench", f"backpressure-{work.name}"),
        parallelism=args.parallelism,
        state=StateConfig("rocksdb", work / "local", 128),
        control_plane=etcd,
        secret=secrets.token_bytes(32),
        args=(
            ("count", str(int(sink_rate * args.seconds))),
            ("keys", str(args.keys)),
            ("rate", str(args.rate)),
            ("sink_rate", str(sink_rate)),
            ("parallelism", str(args.parallelism)),
            ("output", f"file://{work}/out"),
            ("samples", str(samples)),
        ),
        bounded=True,
        unaligned_after_s=after_s,
        in_flight_target_s=DEFAULT_IN_FLIGHT_TARGET_S if sizing else None,
    )
    outcomes = Outcomes()
    config = CheckpointConfig(
        interval_s=args.interval,
        timeout_s=args.checkpoint_timeout,
        tolerable_failures=10_000,
        retained=10_000,
    )
    master = JobMaster(
        spec, BarrierStage(spark), CheckpointStorage(f"file://{work}/checkpoints"), config, listener=outcomes
    )  # type: ignore[arg-type]
    asyncio.run(master.run(restart_strategy("none")))

    reports = [json.loads(p.read_text()) for p in samples.glob("epochs-*.json")]
    count = sum(r["count"] for r in reports)
    expected = int(sink_rate * args.seconds)
    assert count == expected, f"{count} records reached the sinks, {expected} expected"
    completed = {c.checkpoint_id: c for c in outcomes.completions}
    latencies = [
        completed[int(n)].completed_ms / 1000 - t
        for r in reports
        for n, stamps in r["epochs"].items()
        if int(n) in completed
        for t in stamps
    ]
    before_end = [c for c in outcomes.completions if not c.final]
    durations = [c.duration_ms / 1000 for c in before_end]
    channel = [_channel_state(c) for c in before_end]
    row = {
        "label": label,
        "completed": len(before_end),
        "aborted": outcomes.aborts,
        "duration_p50_s": statistics.median(durations) if durations else None,
        "duration_p99_s": _percentile(durations, 0.99) if durations else None,
        "latency_p50_s": statistics.median(latencies),
        "latency_p99_s": _percentile(latencies, 0.99),
        "channel_records_median": statistics.median(r for r, _ in channel) if channel else 0,
        "channel_bytes_max": max((b for _, b in channel), default=0),
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="of input at the sink's rate, per run")
    parser.add_argument("--rate", type=float, default=4000.0, help="the sources' rate; the sink takes half")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--interval", type=float, default=1.0, help="checkpoint interval, seconds")
    parser.add_argument("--checkpoint-timeout", type=float, default=10.0)
    parser.add_argument(
        "--timeout", type=float, default=1.0, help="the aligned-checkpoint timeout of the third configuration"
    )
    args = parser.parse_args()
    configurations = (
        ("aligned", None),
        ("unaligned", 0.0),
        (f"aligned, timeout {args.timeout:g} s", args.timeout),
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = EtcdServer(work / "etcd")
        server.start()
        spark = local_session(args.parallelism, "lockgate-bench")
        spark.sparkContext.setLogLevel("ERROR")
        rows = []
        try:
            etcd = EtcdConfig.from_url(server.endpoint)
            for sizing in (True, False):
                for n, (label, after_s) in enumerate(configurations):
                    name = f"{label}, {'frame sizing' if sizing else 'full frames'}"
                    rows.append(run(spark, etcd, work / f"{int(sizing)}-{n}", args, name, after_s, sizing))
        finally:
            spark.stop()
            server.stop()
    print(HEADER)
    for r in rows:
        print(_table_row(r))


HEADER = (
    "| configuration | checkpoints completed (aborted) | duration p50 / p99 | commit latency p50 / p99 "
    "| channel state per checkpoint: median records; largest |\n|---|---:|---:|---:|---:|"
)


def _table_row(r: dict[str, object]) -> str:
    duration = (
        "-" if r["duration_p50_s"] is None else f"{r['duration_p50_s']:.2f} / {r['duration_p99_s']:.2f} s"
    )
    latency = f"{r['latency_p50_s']:.2f} / {r['latency_p99_s']:.2f} s"
    channel = f"{r['channel_records_median']:,.0f}; {int(r['channel_bytes_max']) / 1024:,.0f} KiB"  # type: ignore[call-overload]
    return f"| {r['label']} | {r['completed']} ({r['aborted']}) | {duration} | {latency} | {channel} |"


if __name__ == "__main__":
    main()
