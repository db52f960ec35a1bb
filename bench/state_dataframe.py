"""Keyed state as a Spark DataFrame, both ways, beside Spark's own `statestore` reader.

Lockgate: two RocksDB backends (P = 2, max parallelism 128) hold KEYS keys in a
ValueState `payload` of VALUE_BYTES bytes each (default 1,000,000 x 1,000 B:
~1 GB), taken as a native checkpoint signed with the job's key (as a running
job's checkpoint is). For P in 1 and 2, in Spark `local[P]`:

- read: `lockgate.state.spark.read_state` (P key-group ranges, one Spark task
  each) aggregated to the row count, the sum of the keys and the sum of the
  payloads' CRC-32s;
- read -> savepoint: the same DataFrame written back as a new savepoint by
  `lockgate.state.spark.bootstrap` (P subtask files, one Spark task each), signed;
  each written savepoint is then read back and checked (not timed).

Spark (bench/peers/spark_state_reader.py, pyspark in its own virtualenv under
.cache/peers/spark): a transformWithState query keeps the same KEYS keys and
payloads in its RocksDB state store; `spark.read.format("statestore")` reads it
at `local[P]` and computes the same aggregate.

Every read's count and checksum must equal what the keys and payloads give.
Each round runs Spark's read, Lockgate's read and Lockgate's read -> savepoint
one after the other (on a shared machine, a load change then hits all three);
median of ROUNDS per row; the ratio is Spark's reader's time at the same P over
the row's.

    .venv/bin/python bench/state_dataframe.py                      # ~1 GB
    .venv/bin/python bench/state_dataframe.py --keys 250000        # ~250 MB
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lockgate.runtime import ValueStateDescriptor, key_group_range
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, VertexState, write_metadata
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, snapshot_subtask
from lockgate.runtime.spark.session import spark_session
from lockgate.state import KeyContext, SavepointWriter, open_snapshot
from lockgate.state.spark import bootstrap, read_state
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers.virtualenvs import peer_python

M, WRITTEN_P = 128, 2
OPERATOR = "payloads"
PAYLOAD = ValueStateDescriptor("payload")
SCHEMA = "key long, value binary"
PEER = Path(__file__).resolve().parent / "peers" / "spark_state_reader.py"
MB = 1024 * 1024
T = TypeVar("T")


def payload_of(key: int, value_bytes: int) -> bytes:
    """SHA-512 of "key:0", "key:1", … concatenated: what the Spark side computes too."""
    blocks = (hashlib.sha512(f"{key}:{i}".encode()).digest() for i in range(-(-value_bytes // 64)))
    return b"".join(blocks)[:value_bytes]


@dataclass(frozen=True)
class Checksum:
    rows: int
    key_sum: int
    crc_sum: int


def native_checkpoint(work: Path, keys: int, value_bytes: int, key: SnapshotKey) -> tuple[str, Checksum, int]:
    """The checkpoint's URL, what it holds (count and checksum), its bytes."""
    backends = [
        RocksDBKeyedStateBackend(M, key_group_range(M, WRITTEN_P, i), work / "local", incremental=True)
        for i in range(WRITTEN_P)
    ]
    states = [backend.state(PAYLOAD) for backend in backends]
    crc_sum = 0
    for k in range(keys):
        subtask = key_group_of_bytes(serialize_key(k), M) * WRITTEN_P // M
        payload = payload_of(k, value_bytes)
        crc_sum += zlib.crc32(payload)
        backends[subtask].set_current_key(k)
        states[subtask].update(payload)
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    directory = storage.checkpoint_dir("state-bench", 1)
    subtasks = tuple(
        snapshot_subtask(
            SnapshotTarget(storage, directory, OPERATOR, i), 1, "checkpoint", backend, None
        ).complete()
        for i, backend in enumerate(backends)
    )
    for backend in backends:
        backend.close()
    shutil.rmtree(work / "local")
    vertices = {OPERATOR: VertexState(WRITTEN_P, M, subtasks)}
    metadata = CheckpointMetadata("state-bench", 1, "checkpoint", int(time.time() * 1000), vertices)
    write_metadata(storage, directory, metadata, key)
    assert {s.keyed.format for s in subtasks if s.keyed is not None} == {"native"}
    return f"file://{directory}", Checksum(keys, keys * (keys - 1) // 2, crc_sum), metadata.state_bytes


def checksum(frame: DataFrame) -> Checksum:
    (row,) = frame.agg(F.count(F.lit(1)), F.sum("key"), F.sum(F.crc32("value"))).collect()
    return Checksum(int(row[0]), int(row[1] or 0), int(row[2] or 0))


def set_payload(key: Any, records: list[dict[str, Any]], ctx: KeyContext) -> None:
    ctx.state(PAYLOAD).update(bytes(records[0]["value"]))


def timed(run: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = run()
    return result, time.monotonic() - started


class SparkReader:
    """Spark's side (bench/peers/spark_state_reader.py) in the peer's virtualenv: the
    transformWithState query's state made at start, then one read per `read(P)`."""

    def __init__(self, work: Path, keys: int, value_bytes: int) -> None:
        (work / "spark").mkdir()
        self._errors = (work / "spark-stderr.log").open("w")
        self._process = subprocess.Popen(
            [str(peer_python("spark")), str(PEER), str(work / "spark"), str(keys), str(value_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")},
        )
        state = self._answer()
        self.state_bytes = int(state["state_bytes"])
        kept_mb, kept_s = self.state_bytes / MB, state["seconds"]
        print(f"Spark: transformWithState kept {kept_mb:,.0f} MB of state in {kept_s:.0f} s")

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith("{"):
                answer: dict[str, Any] = json.loads(line)
                return answer
        raise RuntimeError(f"Spark's side exited with {self._process.wait()}: see {self._errors.name}")

    def read(self, parallelism: int) -> tuple[Checksum, float]:
        assert self._process.stdin is not None
        self._process.stdin.write(f"{parallelism}\n")
        self._process.stdin.flush()
        done = self._answer()
        return Checksum(done["rows"], done["key_sum"], done["crc_sum"]), float(done["seconds"])

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(120)
        self._errors.close()


Seconds = dict[str, list[float]]


def rounds_at(
    parallelism: int,
    rounds: int,
    spark_reader: SparkReader,
    work: Path,
    url: str,
    key: SnapshotKey,
    expected: Checksum,
) -> Seconds:
    """`rounds` rounds at P: Spark's read, Lockgate's read, Lockgate's read -> savepoint."""
    spark = spark_session(f"local[{parallelism}]", "state-dataframe-bench", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    ref = open_snapshot(url, key).state(OPERATOR, PAYLOAD.name)
    seconds: Seconds = {SPARK_READ: [], "Lockgate read": [], "Lockgate read -> savepoint": []}
    try:
        for index in range(rounds):
            found, spark_s = spark_reader.read(parallelism)
            check(f"Spark's reader, P={parallelism}", found, expected)
            seconds[SPARK_READ].append(spark_s)
            found, read_s = timed(
                lambda: checksum(read_state(spark, ref, schema=SCHEMA, partitions=parallelism))
            )
            check(f"Lockgate's reader, P={parallelism}", found, expected)
            seconds["Lockgate read"].append(read_s)
            target = f"file://{work}/savepoints/p{parallelism}-{index}"

            def write_back(target: str = target) -> None:
                frame = read_state(spark, ref, schema=SCHEMA, partitions=parallelism)
                writer = SavepointWriter.new(M, job_id="state-bench")
                bootstrap(writer, OPERATOR, frame, "key", set_payload, parallelism=parallelism).write(
                    target, key
                )

            seconds["Lockgate read -> savepoint"].append(timed(write_back)[1])
            written = open_snapshot(target, key).state(OPERATOR, PAYLOAD.name)
            check("the savepoint written", checksum(read_state(spark, written, schema=SCHEMA)), expected)
            shutil.rmtree(target.removeprefix("file://"))
            print(
                f"P={parallelism} round {index + 1}: "
                + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in seconds.items())
            )
    finally:
        spark.stop()
    return seconds


SPARK_READ = "Spark `statestore` reader, transformWithState state"


def check(what: str, found: Checksum, expected: Checksum) -> None:
    if found != expected:
        raise AssertionError(f"{what}: {found}, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-state-dataframe-"))
    key = SnapshotKey(secrets.token_bytes(32), "the bench job's key")
    started = time.monotonic()
    url, expected, lockgate_bytes = native_checkpoint(work, args.keys, args.value_bytes, key)
    filled_s = time.monotonic() - started
    print(f"Lockgate: native checkpoint of {lockgate_bytes / MB:,.0f} MB written in {filled_s:.0f} s")
    spark_reader = SparkReader(work, args.keys, args.value_bytes)
    by_p = {p: rounds_at(p, args.rounds, spark_reader, work, url, key, expected) for p in (1, 2)}
    spark_reader.close()
    lockgate_mb, spark_mb = lockgate_bytes / MB, spark_reader.state_bytes / MB
    sizes = f"Lockgate {lockgate_mb:,.0f} MB (native checkpoint), Spark {spark_mb:,.0f} MB"
    print(f"\n{args.keys:,} keys x {args.value_bytes} B; state: {sizes}; median of {args.rounds}, verified\n")
    print("| operation | Spark tasks | seconds | rows/s | MB/s | ÷ Spark's reader |")
    print("|---|---:|---:|---:|---:|---:|")
    megabytes = args.keys * args.value_bytes / MB
    for parallelism, seconds in by_p.items():
        spark = statistics.median(seconds[SPARK_READ])
        for operation, times in seconds.items():
            median = statistics.median(times)
            print(
                f"| {operation} | {parallelism} | {median:.1f} | {args.keys / median:,.0f} | "
                f"{megabytes / median:,.0f} | {spark / median:.2f} |"
            )
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
