"""The keyed running count from Kafka to Kafka, exactly once, on Spark.

2,000,000 records over 100,000 keys, per-key (count, sum) in RocksDB, P = 2 on
`local[2]`, a checkpoint every 5 s, against the tests' Kafka-protocol broker
(tansu, in memory, on this machine). Two rows:

- `throughput`: the input is produced first; `lockgate run … --bounded` reads
  it to the end it saw at start (`stop_at="latest"`). Records/s from the first
  record the sinks got to the last; wall time from the command to its exit
  (start-up and the final commit included). The output is read back with a
  read_committed consumer and checked: every record once, every key's count
  and sum right.
- `latency`: records produced at a fixed rate while the job runs; a
  read_committed consumer of the output measures each record's end-to-end
  latency (production to visibility), for a 5 s and a 1 s checkpoint
  interval: the sink commits an interval's records when its checkpoint
  completes, so the interval bounds the latency.

    .venv/bin/python bench/kafka_throughput.py [--count N] [--keys K] [--rate R] [--rows ROW ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.kafka_broker import QUIET, KafkaBroker, kafka_broker  # noqa: E402

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
PARTITIONS = 4
SAMPLE_EVERY = 50


def produce(broker: KafkaBroker, topic: str, first: int, count: int, keys: int) -> None:
    now = time.time()
    values = (json.dumps({"key": n % keys, "n": n, "t": now}).encode() for n in range(first, first + count))
    broker.produce(topic, values, partition_of=lambda i: (first + i) % PARTITIONS)


def lockgate_run(work: Path, broker: KafkaBroker, topics: tuple[str, str], interval: str, *flags: str) -> Any:
    samples = work / "samples"
    samples.mkdir(parents=True, exist_ok=True)
    command = [
        LOCKGATE, "run", "kafka_job:build", "--job-id", work.name, "-p", "2", "--state-backend", "rocksdb",
        "--checkpoint-interval", interval,
        "--arg", f"bootstrap={broker.bootstrap_servers}", "--arg", f"input={topics[0]}",
        "--arg", f"output={topics[1]}", "--arg", f"samples={samples}", *flags,
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'bench'}:{REPO}"}
    log = (work / "run.log").open("w")
    return subprocess.Popen(
        command, cwd=work, env=environment, stdout=log, stderr=subprocess.STDOUT, text=True
    )


class OutputReader:
    """A read_committed consumer of the output, from its start: counts records,
    checks each key's running count and sum, samples end-to-end latencies."""

    def __init__(self, broker: KafkaBroker, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": f"bench-reader-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        self.seen: dict[int, int] = {}  # n -> times seen
        self.finals: dict[int, tuple[int, int]] = {}  # key -> largest (count, sum)
        self.latencies_ms: list[float] = []

    def read(self, timeout: float = 1.0) -> int:
        messages = self.consumer.consume(10_000, timeout)
        now = time.time()
        for message in messages:
            if message.error() is not None:
                continue
            record = json.loads(message.value())
            n = record["n"]
            self.seen[n] = self.seen.get(n, 0) + 1
            key = record["key"]
            self.finals[key] = max(self.finals.get(key, (0, 0)), (record["count"], record["sum"]))
            if n % SAMPLE_EVERY == 0:
                self.latencies_ms.append((now - record["t"]) * 1000)
        return len(messages)

    def check(self, count: int, keys: int) -> None:
        assert set(self.seen) == set(range(count)), f"lost: {count - len(self.seen)}"
        twice = [n for n, k in self.seen.items() if k > 1]
        assert not twice, f"{len(twice)} records seen more than once, e.g. {twice[:5]}"
        expected = {k: (len(range(k, count, keys)), sum(range(k, count, keys))) for k in range(keys)}
        assert self.finals == expected, "a key's count or sum is wrong"


def throughput(broker: KafkaBroker, work: Path, args: argparse.Namespace) -> None:
    topics = (broker.create_topic(PARTITIONS, "numbers"), broker.create_topic(2, "counts"))
    produce(broker, topics[0], 0, args.count, args.keys)
    started = time.monotonic()
    run = lockgate_run(work, broker, topics, "5", "--bounded", "--arg", "stop_at=latest")
    assert run.wait(1800) == 0, (work / "run.log").read_text()[-4000:]
    wall = time.monotonic() - started
    reports = [json.loads(p.read_text()) for p in (work / "samples").glob("*.json")]
    written = sum(r["count"] for r in reports)
    span = max(r["last"] for r in reports) - min(r["first_write"] for r in reports)
    reader = OutputReader(broker, topics[1])
    while len(reader.seen) < args.count and reader.read(5.0):
        pass
    reader.check(args.count, args.keys)
    print(
        f"throughput: {written / span:,.0f} records/s over {span:.1f} s through the job; "
        f"wall {wall:.1f} s (start and final commit included): {args.count / wall:,.0f} records/s; "
        "output checked: each record once, every key's count and sum right",
        flush=True,
    )


def latency(broker: KafkaBroker, work: Path, args: argparse.Namespace, interval: str) -> None:
    topics = (broker.create_topic(PARTITIONS, "numbers"), broker.create_topic(2, "counts"))
    count = int(args.rate * args.seconds)
    run = lockgate_run(work, broker, topics, interval)
    reader = OutputReader(broker, topics[1])
    producing = threading.Thread(target=paced_input, args=(broker, topics[0], count, args))
    # Latency is measured once the job runs: after its first progress line.
    while " s | read" not in (work / "run.log").read_text():
        assert run.poll() is None, (work / "run.log").read_text()[-4000:]
        time.sleep(0.2)
    producing.start()
    deadline = time.monotonic() + args.seconds + 120
    while len(reader.seen) < count and time.monotonic() < deadline:
        reader.read()
    producing.join()
    run.send_signal(signal.SIGINT)
    run.wait(120)
    reader.check(count, args.keys)
    ordered = sorted(reader.latencies_ms)
    p50, p99 = statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]
    print(
        f"latency, checkpoint every {interval} s: {args.rate:,.0f} records/s offered "
        f"for {args.seconds:.0f} s; "
        f"end-to-end p50 {p50:,.0f} ms, p99 {p99:,.0f} ms, max {ordered[-1]:,.0f} ms; output checked",
        flush=True,
    )


def paced_input(broker: KafkaBroker, topic: str, count: int, args: argparse.Namespace) -> None:
    """`count` records at `args.rate` per second, in 50 ms slices, each stamped when sent."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, **QUIET})
    per_slice = max(1, int(args.rate / 20))
    started = time.monotonic()
    for first in range(0, count, per_slice):
        due = started + first / args.rate
        time.sleep(max(0.0, due - time.monotonic()))  # the pacing of the input
        now = time.time()
        for n in range(first, min(count, first + per_slice)):
            value = json.dumps({"key": n % args.keys, "n": n, "t": now}).encode()
            while True:
                try:
                    producer.produce(topic, value, partition=n % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)


ROWS = ("throughput", "latency-5", "latency-1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=20_000, help="records/s offered in the latency rows")
    parser.add_argument("--seconds", type=float, default=30, help="how long the latency rows offer input")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with kafka_broker(work / "tansu.log") as broker:
            for n, row in enumerate(args.rows):
                directory = work / f"{row}-{n}"
                directory.mkdir()
                if row == "throughput":
                    throughput(broker, directory, args)
                else:
                    latency(broker, directory, args, row.removeprefix("latency-"))


if __name__ == "__main__":
    main()
