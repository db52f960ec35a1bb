"""`KafkaSink`: records to a topic; exactly once in an exactly-once job.

Exactly-once: the records of an epoch (between two checkpoint barriers) are
kept by the writer, handed to the checkpoint at the barrier as the sink's
committable, and sent in one Kafka transaction when the checkpoint completes
(`epoch_transactions.py` says why, and how a restore finds which epochs were
committed). A record reaches `read_committed` consumers about one checkpoint
interval after it was written, as with any transactional sink, and the
checkpoint holds the records of the epochs not yet committed.

Transactional ids are `lockgate.<namespace>.<job>.<vertex>.<subtask>`: the
same in every launch, so a restarted subtask fences the one it replaces; a
writer whose launch a later one replaced sends nothing (it asks before and
after fencing: `epoch_transactions.py`). After
a restore at another parallelism, each old subtask's id is taken over by the
new subtask `old % parallelism`, which commits what the checkpoint holds of it.

Partitioning: by default the producer's partitioner places a record by its
key (without a key, spread). `partitioning="subtask"` writes all of subtask
i's records to partition i % the topic's partitions, as Flink's fixed
partitioner does. An old subtask's epochs that a restore at another
parallelism sends again go to partition old % partitions, where that subtask
wrote them (if the topic's partition count did not change meanwhile). While
the topic has at least as many partitions as the sink ever had subtasks,
each partition holds one transactional id's output, in the order it was
written, and no two transactions share a partition; with fewer, subtasks
share partitions round robin.

At-least-once: records are sent as they come (idempotent producer, acks from
all replicas) and the barrier waits until every one is acknowledged; a restore
may send some again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from lockgate.runtime.api.connectors import JobIdentity, Sink, SinkWriter, SubtaskContext
from lockgate.runtime.api.validation import check_callable
from lockgate.runtime.connectors.kafka.epoch_transactions import (
    TRANSACTION_TIMEOUT_S,
    Epoch,
    EpochTransactions,
    Records,
)
from lockgate.runtime.connectors.kafka.record_format import encode_key, encoder
from lockgate.runtime.connectors.kafka.settings import (
    VALUE_FORMATS,
    KafkaConnectorError,
    check_choice,
    check_properties,
    check_text,
    check_topics,
    kafka_client,
    make_client,
)

log = logging.getLogger(__name__)

PARTITIONINGS = ("key", "subtask")


class KafkaSink(Sink):
    """Records to a Kafka topic; exactly once through one Kafka transaction per checkpoint."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        key: Callable[[Any], Any] | None = None,
        value_format: str = "json",
        partitioning: str = "key",
        properties: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = check_text("KafkaSink bootstrap_servers", bootstrap_servers)
        self.topic = check_text("KafkaSink topic", topic)
        if key is not None:
            check_callable("KafkaSink key", key)
        self.key = key
        self.value_format = check_choice("KafkaSink value_format", value_format, VALUE_FORMATS)
        self.partitioning = check_choice("KafkaSink partitioning", partitioning, PARTITIONINGS)
        self.properties = check_properties("KafkaSink", properties)

    def client_config(self) -> dict[str, str]:
        """The producer's configuration: `properties` with the bootstrap servers."""
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers}

    def validate(self, job: JobIdentity) -> None:
        make_client(kafka_client().Producer, self.client_config(), "KafkaSink").flush(0)
        check_topics("KafkaSink", self.properties, self.bootstrap_servers, [self.topic])

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        if context.exactly_once:
            return TransactionalKafkaWriter(self, context)
        return AtLeastOnceKafkaWriter(self, context)


def partition_of(sink: KafkaSink, producer: Any) -> Callable[[int], int]:
    """Subtask -> the partition its records go to: the producer's partitioner's
    choice (-1) unless the sink partitions by subtask."""
    if sink.partitioning == "key":
        return lambda subtask: -1
    kafka = kafka_client()
    try:
        metadata = producer.list_topics(sink.topic, timeout=TRANSACTION_TIMEOUT_S)
    except kafka.KafkaException as error:
        raise KafkaConnectorError(
            f"KafkaSink: cannot list the partitions of {sink.topic!r}: {error}"
        ) from None
    found = metadata.topics.get(sink.topic)
    if found is None or found.error is not None or not found.partitions:
        why = "it does not exist" if found is None else str(found.error or "it has no partitions")
        raise KafkaConnectorError(
            f"KafkaSink: the partitions of {sink.topic!r} to write by subtask are unknown: {why}; "
            "the job restarts from its last checkpoint"
        )
    count = len(found.partitions)
    return lambda subtask: subtask % count


def transactional_id(context: SubtaskContext, subtask: int) -> str:
    return f"lockgate.{context.job.namespace}.{context.job.job}.{context.vertex}.{subtask}"


def _record_encoder(sink: KafkaSink, vertex: str) -> Callable[[Any], tuple[bytes | None, bytes]]:
    """A record's message key and value."""
    key_fn = sink.key
    encode = encoder(sink.value_format, vertex)
    if key_fn is None:
        return lambda record: (None, encode(record))
    return lambda record: (encode_key(key_fn(record), vertex), encode(record))


class TransactionalKafkaWriter(SinkWriter):
    def __init__(self, sink: KafkaSink, context: SubtaskContext) -> None:
        self._sink = sink
        self._context = context
        self._encode = _record_encoder(sink, context.vertex)
        self._epoch: Records = []
        self._partition_of: Callable[[int], int] | None = None
        self._own = self._transactions(context.subtask)

    def _transactions(self, subtask: int) -> EpochTransactions:
        """The transactions of `subtask`'s transactional id, to that subtask's partition
        when the sink partitions by subtask."""
        context = self._context
        transactions = EpochTransactions(
            self._sink.client_config(),
            transactional_id(context, subtask),
            self._sink.topic,
            context.confirm_launch,
            context.launch,
        )
        try:
            if self._partition_of is None:
                self._partition_of = partition_of(self._sink, transactions.producer)
        except KafkaConnectorError:
            transactions.close()
            raise
        transactions.partition = self._partition_of(subtask)
        return transactions

    def write(self, record: Any) -> None:
        self._epoch.append(self._encode(record))

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        records, self._epoch = self._epoch, []
        if not records:
            return []
        return [Epoch.seal(self._context.subtask, checkpoint_id, records).to_committable()]

    def commit(self, committables: list[Any]) -> None:
        for epoch in sorted((Epoch.from_committable(c) for c in committables), key=lambda e: e.checkpoint):
            self._own.commit(epoch)

    def recover(self, committables: list[Any]) -> None:
        """Commits, per old subtask of this writer's share, the epochs the checkpoint
        holds and the broker has not committed. Every id of the share is fenced
        first, and no marker is read before every writer of the launch has fenced
        its own: a broker may hold a commit it acknowledged until the transactions
        overlapping it have ended (tansu does), and fencing ends an old launch's
        open ones, so a marker read earlier could be older than what will show."""
        parallelism, subtask = self._context.parallelism, self._context.subtask
        by_subtask: dict[int, list[Epoch]] = {}
        for committable in committables:
            epoch = Epoch.from_committable(committable)
            by_subtask.setdefault(epoch.subtask, []).append(epoch)
        share = [
            (self._own if old == subtask else self._transactions(old), epochs)
            for old, epochs in sorted(by_subtask.items())
            if old % parallelism == subtask
        ]
        try:
            self._context.rendezvous("transactional ids fenced")
            self._own.read_marker()
            for transactions, epochs in share:
                unsent = transactions.uncommitted(epochs)
                log.info(
                    "KafkaSink: %s shows %s; of the checkpoints whose epochs the restore holds "
                    "(%s), sends %s",
                    transactions.transactional_id,
                    transactions.last_committed(),
                    ", ".join(f"{epoch.checkpoint} (nonce {epoch.nonce:#x})" for epoch in epochs),
                    ", ".join(str(epoch.checkpoint) for epoch in unsent) or "none",
                )
                for epoch in unsent:
                    transactions.commit(epoch)
        finally:
            for transactions, _ in share:
                if transactions is not self._own:
                    transactions.close()

    def close(self) -> None:
        self._own.close()


class AtLeastOnceKafkaWriter(SinkWriter):
    def __init__(self, sink: KafkaSink, context: SubtaskContext) -> None:
        kafka = kafka_client()
        config = {**sink.client_config(), "enable.idempotence": "true", "acks": "all"}
        self._producer: Any = make_client(kafka.Producer, config, "KafkaSink")
        self._encode = _record_encoder(sink, context.vertex)
        self._topic = sink.topic
        self._partition = partition_of(sink, self._producer)(context.subtask)
        self._failed: list[str] = []
        self._unpolled = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._failed.append(error.str())

    def write(self, record: Any) -> None:
        key, value = self._encode(record)
        while True:
            try:
                self._producer.produce(self._topic, value, key, self._partition, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._unpolled += 1
        if self._unpolled >= 1000:
            self._producer.poll(0)
            self._unpolled = 0

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        """The barrier passes once every record written before it is acknowledged."""
        left = self._producer.flush(TRANSACTION_TIMEOUT_S)
        if left or self._failed:
            what = f"{left} record(s) unacknowledged" if left else f"delivery failed: {self._failed[0]}"
            raise KafkaConnectorError(f"KafkaSink to {self._topic!r}: checkpoint {checkpoint_id}: {what}")
        return []

    def commit(self, committables: list[Any]) -> None:
        pass

    def recover(self, committables: list[Any]) -> None:
        pass

    def close(self) -> None:
        self._producer.flush(0)
