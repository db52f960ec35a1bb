"""Windows on Spark: a tumbling one-minute count per key over timestamped clicks.

2M generated records (one per millisecond of event time: 34 minutes) over 100k
keys, RocksDB state, P = 2 on `local[2]`, exactly-once with a checkpoint every
5 s. Reports records/s from the first record read to the last window emitted,
the reading rate alone, and the time from the final watermark (the sources'
end of input) to the last window emitted. Checks that every record was counted
once and no window was emitted twice. Then, unless `--no-flink`, the same
workload in Flink SQL (a TUMBLE window; bench/peers/flink_window.py) in its own
virtualenv under .cache/peers/flink (bench/peers/virtualenvs.py), and the ratio.

    .venv/bin/python bench/window_throughput.py [--count N] [--keys K] [--parallelism P]
                                                [--repeat R] [--no-flink]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import subprocess
import tempfile
import time
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage, local_session
from peers.virtualenvs import peer_python

REPO = Path(__file__).resolve().parent.parent


def measure_flink(work: Path, args: argparse.Namespace) -> float:
    """Flink SQL's records/s on the same workload (net job runtime)."""
    output = work / "flink-out"
    script = REPO / "bench" / "peers" / "flink_window.py"
    command = [
        str(peer_python("flink")),
        str(script),
        str(args.count),
        str(args.keys),
        str(args.parallelism),
        str(output),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the Flink run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["counted"] == args.count, f"Flink counted {result['counted']} of {args.count} records"
    rate = args.count / result["runtime_s"]
    print(
        f"   flink: {rate:10,.0f} records/s (net job runtime {result['runtime_s']:5.1f} s, "
        f"wall {result['wall_s']:5.1f} s incl. start), {result['windows']:,} windows",
        flush=True,
    )
    return rate


def measure(spark: object, etcd: EtcdConfig, work: Path, args: argparse.Namespace) -> float:
    samples = work / "samples"
    samples.mkdir(parents=True)
    spec = JobSpec(
        entrypoint="window_job:build",
        keys=JobKeys("bench", f"windows-{work.name}"),
        parallelism=args.parallelism,
        state=StateConfig("rocksdb", work / "local", 128),
        control_plane=etcd,
        secret=secrets.token_bytes(32),
        args=(
            ("count", str(args.count)),
            ("keys", str(args.keys)),
            ("output", f"file://{work}/out"),
            ("samples", str(samples)),
        ),
        bounded=True,
    )
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    started = time.monotonic()
    config = CheckpointConfig(interval_s=5.0, timeout_s=600)
    master = JobMaster(spec, BarrierStage(spark), storage, config)  # type: ignore[arg-type]
    asyncio.run(master.run(restart_strategy("none")))
    wall = time.monotonic() - started
    sources = [json.loads(p.read_text()) for p in samples.glob("source-*.json")]
    sinks = [json.loads(p.read_text()) for p in samples.glob("sink-*.json")]
    counted = sum(s["counted"] for s in sinks)
    assert counted == args.count, f"the windows counted {counted} records, {args.count} were read"
    output = read_committed(f"file://{work}/out")
    windows = {(r["key"], r["start"]) for r in output}
    assert len(windows) == len(output), "a window was emitted twice"
    first = min(s["first"] for s in sources)
    end_of_input = max(s["end"] for s in sources)
    last = max(s["last"] for s in sinks if s["windows"])
    print(
        f"windows: {args.count / (last - first):10,.0f} records/s first read to last window "
        f"({args.count / (end_of_input - first):,.0f}/s reading), final watermark to last window "
        f"{last - end_of_input:5.2f} s, {len(windows):,} windows, wall {wall:5.1f} s incl. start",
        flush=True,
    )
    return args.count / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-flink", action="store_true", help="skip the Flink SQL peer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = EtcdServer(work / "etcd")
        server.start()
        spark = local_session(args.parallelism, "lockgate-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            for n in range(args.repeat):  # alternating, so drift on the machine hits both alike
                ours = measure(spark, EtcdConfig.from_url(server.endpoint), work / str(n), args)
                if not args.no_flink:
                    theirs = measure_flink(work / str(n), args)
                    print(f"   ratio: Lockgate / Flink SQL = {ours / theirs:.2f}", flush=True)
        finally:
            spark.stop()
            server.stop()


if __name__ == "__main__":
    main()
