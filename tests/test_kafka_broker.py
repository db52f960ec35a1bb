"""Where the tests' Kafka-protocol broker (tansu 0.6.0) differs from Apache
Kafka, shown, so that no test passes by relying on it and each difference is
noticed when tansu changes. docs/operations.md lists them. Last, what the Kafka
sink relies on, shown to hold on tansu too."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.kafka_broker import QUIET, KafkaBroker, commit_like_a_sink


def test_a_latest_offset_lookup_answers_the_last_batch_base_offset_plus_one(kafka: KafkaBroker) -> None:
    """Apache Kafka answers 10 (the next offset). The tests' input is produced one
    message per batch, where both agree."""
    topic = kafka.create_topic(1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 50, **QUIET})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "probe", **QUIET})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 1)
    consumer.close()


def test_a_fetch_carries_the_true_high_watermark(kafka: KafkaBroker) -> None:
    """Unlike its latest-offset lookup, the high watermark in tansu's fetch
    responses is the next offset, whatever the batches hold (as Apache Kafka's):
    the one KafkaSource's backlog reads (`cached=True`)."""
    topic = kafka.create_topic(1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 50, **QUIET})
    for count in (50, 30):  # two batches
        for i in range(count):
            producer.produce(topic, b"%d" % i, partition=0)
        assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "probe", **QUIET})
    partition = TopicPartition(topic, 0)
    assert consumer.get_watermark_offsets(partition, timeout=10, cached=False) == (0, 51), "the lookup's"
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    deadline = time.monotonic() + 30
    while read < 80:
        assert time.monotonic() < deadline, f"read {read} of 80 messages"
        read += sum(1 for message in consumer.consume(100, timeout=0.5) if message.error() is None)
    assert consumer.get_watermark_offsets(partition, cached=True) == (0, 80), "the fetch's"
    consumer.close()


def test_read_committed_consumers_see_the_records_of_aborted_transactions(kafka: KafkaBroker) -> None:
    """Apache Kafka hides them. Open transactions are hidden (the last stable
    offset holds), so only a sink transaction aborted after it began sending is
    seen; Lockgate's sink sends an epoch only once its checkpoint is complete."""
    topic = kafka.create_topic(1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": topic, **QUIET})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(30)
    values = [value for _, _, _, value in kafka.read(topic, "read_committed")]
    assert values == [b"aborted", b"committed"]
    producer.abort_transaction(30)


def test_partitions_cannot_be_added_to_a_topic(kafka: KafkaBroker) -> None:
    """So KafkaSource's discovery of added partitions cannot be tried on it."""
    topic = kafka.create_topic(1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, **QUIET})
    future = admin.create_partitions([NewPartitions(topic, 2)])[topic]
    with pytest.raises(KafkaException, match=r"CreatePartitions .* not supported"):
        future.result(30)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 1


def test_the_metadata_of_an_offset_committed_in_a_transaction_is_dropped(kafka: KafkaBroker) -> None:
    """Apache Kafka keeps it. So KafkaSink packs an epoch's marker into the offset."""
    topic = kafka.create_topic(1)
    group = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"g-{topic}", **QUIET})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": topic, **QUIET})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    marker = [TopicPartition(topic, 0, 42, metadata="epoch-token")]
    producer.send_offsets_to_transaction(marker, group.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    committed = group.committed([TopicPartition(topic, 0)], timeout=30)[0]
    assert (committed.offset, committed.metadata) == (42, None)
    group.close()


def test_a_transaction_overlapping_an_open_one_is_acknowledged_before_it_is_committed(
    kafka: KafkaBroker,
) -> None:
    """Apache Kafka completes a commit whatever other producers do. tansu answers
    the commit at once but holds it (records and offsets) until every transaction
    that wrote to the same partitions in between has ended too."""
    topic = kafka.create_topic(1)

    def transactional(name: str) -> Producer:
        producer = Producer(
            {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"{topic}-{name}", **QUIET}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, name.encode(), partition=0)
        assert producer.flush(30) == 0
        return producer

    group = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"{topic}-marker", **QUIET})
    marker = TopicPartition(topic, 0, 42)

    def marker_offset() -> int:
        return int(group.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)

    still_open, committing = transactional("open"), transactional("committing")
    committing.send_offsets_to_transaction([marker], group.consumer_group_metadata(), 30)
    committing.commit_transaction(30)
    assert marker_offset() < 0, "tansu showed the commit while an overlapping transaction was open"
    still_open.commit_transaction(30)
    assert marker_offset() == 42
    group.close()


# -- what the Kafka sink relies on, shown to hold on tansu as on Apache Kafka ------


def _transactional(kafka: KafkaBroker, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": transactional_id, **QUIET}
    )
    producer.init_transactions(30)
    return producer


def test_a_fenced_producer_appends_nothing_more(kafka: KafkaBroker) -> None:
    """A writer of a launch that a later one replaced keeps nothing it sends after
    the fence (a restore's `init_transactions` of the same id)."""
    topic = kafka.create_topic(1)
    zombie = _transactional(kafka, topic)
    zombie.begin_transaction()
    zombie.produce(topic, b"before the fence", partition=0)
    assert zombie.flush(30) == 0
    _transactional(kafka, topic)  # the successor: its init fences the zombie
    errors: list[str] = []
    zombie.produce(topic, b"after the fence", partition=0, on_delivery=lambda e, _: errors.append(e.name()))
    zombie.flush(30)
    assert errors == ["PRODUCER_FENCED"]
    with pytest.raises(KafkaException, match="PRODUCER_FENCED"):
        zombie.commit_transaction(30)
    assert [value for _, _, _, value in kafka.read(topic, "read_uncommitted")] == [b"before the fence"]


def test_a_commit_held_by_an_open_transaction_shows_once_a_fence_aborts_that_one(kafka: KafkaBroker) -> None:
    """A writer dies with its transaction open while another's commit is held behind
    it (tansu): the restore's fence of the dead writer's id aborts it, and the held
    commit shows, so the restore reads the marker it committed (`recover` reads
    markers only after every id is fenced)."""
    topic = kafka.create_topic(1)
    group = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"{topic}-b", **QUIET})
    dead, committing = _transactional(kafka, f"{topic}-a"), _transactional(kafka, f"{topic}-b")
    dead.begin_transaction()
    dead.produce(topic, b"a", partition=0)
    assert dead.flush(30) == 0
    committing.begin_transaction()
    committing.produce(topic, b"b", partition=0)
    assert committing.flush(30) == 0
    committing.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], group.consumer_group_metadata(), 30)
    committing.commit_transaction(30)

    def marker() -> int:
        return int(group.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)

    assert marker() < 0, "held behind the open transaction"
    _transactional(kafka, f"{topic}-a")  # the restore fences the dead writer's id
    assert marker() == 7
    group.close()


def test_the_last_stable_offset_trails_an_open_transaction(kafka: KafkaBroker) -> None:
    """What `KafkaBroker.transaction_open` reads, for the tests that kill a worker
    only between transactions."""
    topic = kafka.create_topic(2)
    producer = _transactional(kafka, topic)
    assert not kafka.transaction_open(topic)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=1)
    assert producer.flush(30) == 0
    assert kafka.transaction_open(topic)
    producer.commit_transaction(30)
    assert not kafka.transaction_open(topic)


def test_writers_with_a_partition_each_restarting_between_transactions_see_every_commit_shown(
    kafka: KafkaBroker,
) -> None:
    """What the suite's Kafka jobs rely on (`partitioning="subtask"`): four writers,
    each on a partition of its own, committing as the sink does and restarting
    their producer every 25 transactions as a relaunched job's writers do: every
    commit shows. With both partitions shared, the same loop can wedge the topic
    for good (it did in 1 run of 3 here; bench/tansu_transactions.py at this size:
    4 trials of 6; docs/benchmarks.md)."""
    topic = kafka.create_topic(4)
    outcomes: dict[int, str] = {}

    def write(partition: int) -> None:
        outcomes[partition] = commit_like_a_sink(
            kafka, topic, f"{topic}-{partition}", [partition], 300, restart_every=25
        )

    writers = [threading.Thread(target=write, args=(partition,)) for partition in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert outcomes == dict.fromkeys(range(4), "ok")
