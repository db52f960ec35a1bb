"""KafkaSource against a real Kafka-protocol broker: partitions split over
subtasks, offsets restored exactly at another parallelism, bounded reading,
and every refusal before a job starts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from lockgate.runtime import (
    Backlog,
    JobDefinitionError,
    KafkaRecord,
    KafkaSource,
    SourceReader,
    read_committed,
)
from lockgate.runtime.api.connectors import UnreadableRecordError
from lockgate.runtime.connectors.kafka.settings import BROKER_TIMEOUT_S, KafkaSetupError

from tests.kafka_broker import QUIET, KafkaBroker
from tests.polling import wait_until
from tests.runtime.connectors.subtasks import JOB, open_reader

QUIET_PROPERTIES = {"log_level": 3}


def source(kafka: KafkaBroker, topic: str, **options: Any) -> KafkaSource:
    options.setdefault("properties", QUIET_PROPERTIES)
    return KafkaSource(
        bootstrap_servers=kafka.bootstrap_servers, topics=[topic], group_id="g-" + topic, **options
    )


def produce_json(kafka: KafkaBroker, topic: str, first: int, count: int, partitions: int) -> None:
    kafka.produce(
        topic,
        (json.dumps({"n": n}).encode() for n in range(first, first + count)),
        partition_of=lambda i: (first + i) % partitions,
    )


def read_until(reader: SourceReader, count: int, timeout: float = 30) -> list[Any]:
    """Polls `reader` until it returned `count` records (more is a failure)."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"read {len(records)} of {count} records in {timeout} s"
        records.extend(reader.poll(count - len(records)))
    assert len(records) == count, f"read {len(records)} records, expected {count}"
    return records


def drain(reader: SourceReader, timeout: float = 30) -> list[Any]:
    """Everything the reader returns until it says it reached the end."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while True:
        batch = reader.poll(1000)
        records.extend(batch)
        if not batch and reader.reached_end():
            return records
        assert time.monotonic() < deadline, f"not at the end after {len(records)} records in {timeout} s"


def test_the_partitions_are_split_over_subtasks_and_read_once(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(4)
    produce_json(kafka, topic, 0, 400, 4)
    readers = [open_reader(source(kafka, topic), subtask, 2) for subtask in range(2)]
    read = [drain(reader) for reader in readers]
    assert sorted(readers[0].partitions()) == [f"{topic}-0", f"{topic}-2"]
    assert sorted(readers[1].partitions()) == [f"{topic}-1", f"{topic}-3"]
    assert sorted(r["n"] for batch in read for r in batch) == list(range(400))
    for reader in readers:
        reader.close()


def test_offsets_restore_exactly_at_another_parallelism(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(3)
    produce_json(kafka, topic, 0, 300, 3)
    first = [open_reader(source(kafka, topic), subtask, 2) for subtask in range(2)]
    seen = [r["n"] for reader in first for r in read_until(reader, 60)]
    offsets: dict[str, Any] = {}
    for reader in first:
        offsets.update(reader.offsets())
        reader.close()
    assert sum(offsets.values()) == 120
    produce_json(kafka, topic, 300, 90, 3)
    second = [open_reader(source(kafka, topic), subtask, 3, offsets) for subtask in range(3)]
    for reader in second:
        seen.extend(r["n"] for r in drain(reader))
        reader.close()
    assert sorted(seen) == list(range(390)), "each record once, none lost"


def test_latest_starts_after_what_is_there_and_committed_falls_back_to_earliest(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    produce_json(kafka, topic, 0, 10, 1)
    latest = open_reader(source(kafka, topic, starting_offsets="latest"))
    assert latest.offsets() == {f"{topic}-0": 10}, "resolved to a concrete offset at once"
    committed = open_reader(source(kafka, topic, starting_offsets="committed"))
    assert [r["n"] for r in drain(committed)] == list(range(10))
    produce_json(kafka, topic, 10, 5, 1)
    assert [r["n"] for r in read_until(latest, 5)] == list(range(10, 15))
    latest.close()
    committed.close()


def test_committed_offsets_are_written_back_after_a_checkpoint_and_used_by_committed(
    kafka: KafkaBroker,
) -> None:
    topic = kafka.create_topic(1)
    produce_json(kafka, topic, 0, 20, 1)
    reader = open_reader(source(kafka, topic))
    read_until(reader, 20)
    committables = reader.pre_commit(1)
    assert committed_offset(kafka, topic) is None, "nothing is written back before the checkpoint completes"
    reader.commit(committables)
    deadline = time.monotonic() + 10
    while committed_offset(kafka, topic) != 20:
        assert time.monotonic() < deadline, "the group's offset was not committed"
        reader.poll(1)  # serves the asynchronous commit
    reader.close()
    produce_json(kafka, topic, 20, 3, 1)
    again = open_reader(source(kafka, topic, starting_offsets="committed"))
    assert [r["n"] for r in drain(again)] == [20, 21, 22]
    again.close()


def committed_offset(kafka: KafkaBroker, topic: str) -> int | None:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "g-" + topic, **QUIET})
    try:
        offset = consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
        return None if offset < 0 else int(offset)
    finally:
        consumer.close()


def test_stop_at_latest_reads_up_to_the_end_seen_at_start_and_no_further(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(2)
    produce_json(kafka, topic, 0, 50, 2)
    reader = open_reader(source(kafka, topic, stop_at="latest"))
    produce_json(kafka, topic, 50, 50, 2)
    records = drain(reader)
    assert sorted(r["n"] for r in records) == list(range(50))
    assert reader.offsets() == {f"{topic}-0": 25, f"{topic}-1": 25}
    reader.close()


def test_with_metadata_records_carry_where_they_came_from(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    produce_json(kafka, topic, 0, 2, 1)
    reader = open_reader(source(kafka, topic, with_metadata=True, value_format="string"))
    first, second = drain(reader)
    assert isinstance(first, KafkaRecord)
    assert (first.topic, first.partition, first.offset, first.value) == (topic, 0, 0, '{"n": 0}')
    assert second.offset == 1
    assert isinstance(first.timestamp_ms, int)
    assert abs(first.timestamp_ms - time.time() * 1000) < 60_000
    reader.close()


def test_a_message_that_is_not_json_names_its_partition_and_offset_and_the_policy(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    kafka.produce(topic, [b'{"n": 0}', b"not json"])
    reader = open_reader(source(kafka, topic))
    with pytest.raises(
        UnreadableRecordError, match=rf"topic '{topic}' partition 0 offset 1 is not 'json'"
    ) as refused:
        drain(reader)
    assert "Set dead_letter=URL on the KafkaSource" in str(refused.value)
    reader.close()


def test_a_poison_or_oversized_message_goes_to_the_dead_letters_and_the_rest_is_read_once(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """With dead_letter= the source reads on past a message that is not JSON and one over
    max_record_bytes; each is set aside once, visible when its checkpoint completes, and
    a restore of that checkpoint writes neither again."""
    topic = kafka.create_topic(1)
    big = json.dumps({"n": -1, "pad": "x" * 200}).encode()
    kafka.produce(topic, [b'{"n": 0}', b"\xff not json", b'{"n": 1}', big, b'{"n": 2}'])
    dead = f"file://{tmp_path}/dead"
    poisoned = source(kafka, topic, dead_letter=dead, max_record_bytes=100)
    reader = open_reader(poisoned)
    assert [r["n"] for r in drain(reader)] == [0, 1, 2]
    assert reader.offsets() == {f"{topic}-0": 5}
    committables = reader.pre_commit(1)
    assert read_committed(dead) == [], "visible only once its checkpoint completes"
    reader.commit(committables)
    letters = sorted(read_committed(dead), key=lambda letter: letter["offset"])
    where = [(letter["topic"], letter["partition"], letter["offset"]) for letter in letters]
    assert where == [(topic, 0, 1), (topic, 0, 3)]
    assert "is not 'json'" in letters[0]["error"]
    assert letters[0]["value"] == "\ufffd not json"
    assert letters[1]["error"] == f"is {len(big)} bytes (key and value), over max_record_bytes=100"
    assert letters[1]["bytes"] == len(big)
    reader.close()
    restored = open_reader(poisoned, offsets=reader.offsets())
    restored.recover(committables)
    assert restored.poll(10) == []
    assert len(read_committed(dead)) == 2, "a restore writes no dead letter twice"
    restored.close()


def test_the_backlog_is_the_records_not_read_yet(kafka: KafkaBroker) -> None:
    """End offset less position, per partition, summed. Produced in batches of
    many messages on purpose: the end offset comes from fetch responses, which tansu
    answers right; its latest-offset lookup would say 1 past the last batch's first
    message (tests/test_kafka_broker.py), and this test would fail on it."""
    topic = kafka.create_topic(2)
    reader = open_reader(source(kafka, topic))
    wait_until(lambda: reader.backlog() == Backlog(records=0), "the end looked up before any fetch", 5)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 50, **QUIET})
    for partition, count in ((0, 50), (0, 30), (1, 40)):  # one batch each
        for n in range(count):
            producer.produce(topic, json.dumps({"n": n}).encode(), partition=partition)
        assert producer.flush(30) == 0
    read = len(read_until(reader, 25))

    # An end offset is as of the partition's last fetch response; one answered before
    # the records arrived says 0, until the next fetch.
    wait_until(lambda: reader.backlog() == Backlog(records=120 - read), "the backlog caught up", 30)
    drain(reader)
    assert reader.backlog() == Backlog(records=0), "read to the end: 0, not unknown"
    reader.close()


def test_the_backlog_counts_records_produced_since_the_consumers_last_fetch(kafka: KafkaBroker) -> None:
    """A consumer far behind fetches again only once its prefetch queue runs low
    (here under 10 messages); tansu's fetch takes every record there is, so the end
    offset of the last fetch response stays where it was while 95 records wait in
    the queue. The backlog looks the end up too (every quarter second): what arrived since
    counts within that. Each partition's last message is in a batch of its own
    (`KafkaBroker.produce`), where tansu's lookup is right."""
    topic = kafka.create_topic(1)
    properties = {**QUIET_PROPERTIES, "queued.min.messages": 10}
    reader = open_reader(source(kafka, topic, properties=properties))
    produce_json(kafka, topic, 0, 100, 1)
    read = len(read_until(reader, 5))
    wait_until(lambda: reader.backlog() == Backlog(records=100 - read), "the first 100 counted", 10)
    produce_json(kafka, topic, 100, 100, 1)
    wait_until(lambda: reader.backlog() == Backlog(records=200 - read), "the next 100 counted", 5)
    reader.close()


def test_an_unreachable_broker_a_missing_topic_and_a_bad_property_are_refused_by_validate(
    kafka: KafkaBroker,
) -> None:
    topic = kafka.create_topic(1)
    unreachable = KafkaSource(
        bootstrap_servers="127.0.0.1:1", topics=[topic], group_id="g", properties=QUIET_PROPERTIES
    )
    started = time.monotonic()
    with pytest.raises(KafkaSetupError, match=r"cannot reach Kafka at 127.0.0.1:1: every broker refused"):
        unreachable.validate(JOB)
    assert time.monotonic() - started < BROKER_TIMEOUT_S / 2, "a refused connection is not waited out"
    with pytest.raises(KafkaSetupError, match=r"topic 'no-such-topic' .* does not exist"):
        source(kafka, "no-such-topic").validate(JOB)
    with pytest.raises(JobDefinitionError, match=r"no\.such\.property"):
        source(kafka, topic, properties={"no.such.property": "1"}).validate(JOB)
    source(kafka, topic).validate(JOB)


@pytest.mark.parametrize(
    ("options", "culprit"),
    [
        ({"bootstrap_servers": 9092}, "bootstrap_servers"),
        ({"topics": "orders"}, "topics"),
        ({"topics": []}, "topics"),
        ({"group_id": None}, "group_id"),
        ({"starting_offsets": "newest"}, "starting_offsets"),
        ({"value_format": "avro"}, "value_format"),
        ({"stop_at": "end"}, "stop_at"),
        ({"with_metadata": "yes"}, "with_metadata"),
        ({"dead_letter": 5}, "dead_letter"),
        ({"max_record_bytes": 0}, "max_record_bytes takes a number of bytes from 1 to 1073741824"),
        ({"max_record_bytes": (1 << 30) + 1}, "max_record_bytes"),
        ({"properties": ["a"]}, "properties"),
        ({"properties": {"group.id": "other"}}, "'group.id' is set by Lockgate"),
        ({"properties": {"fetch.max.bytes": [1]}}, "'fetch.max.bytes'"),
    ],
)
def test_arguments_of_the_wrong_type_or_value_name_the_argument(
    options: dict[str, Any], culprit: str
) -> None:
    arguments: dict[str, Any] = {"bootstrap_servers": "k:9092", "topics": ["t"], "group_id": "g", **options}
    with pytest.raises(JobDefinitionError, match=culprit):
        KafkaSource(**arguments)


def test_a_checkpoint_completing_after_the_reader_closed_still_commits_the_group_offsets(
    kafka: KafkaBroker,
) -> None:
    """A bounded job's final checkpoint completes after its sources ended."""
    topic = kafka.create_topic(1)
    produce_json(kafka, topic, 0, 7, 1)
    reader = open_reader(source(kafka, topic))
    drain(reader)
    committables = reader.pre_commit(5)
    reader.close()
    assert reader.backlog() is None
    reader.commit(committables)
    assert committed_offset(kafka, topic) == 7


def test_records_come_with_their_partition_for_per_partition_watermarks(kafka: KafkaBroker) -> None:
    """What the engine's per-partition watermarks read: each batch under its
    partition's name; with metadata, the Kafka timestamp to assign event time from."""
    topic = kafka.create_topic(2)
    produce_json(kafka, topic, 0, 20, 2)
    reader = open_reader(source(kafka, topic, with_metadata=True))
    by_partition: dict[str, list[Any]] = {}
    deadline = time.monotonic() + 30
    while sum(map(len, by_partition.values())) < 20:
        assert time.monotonic() < deadline, "not every record was read in 30 s"
        for name, batch in reader.poll_partitions(100):
            by_partition.setdefault(name, []).extend(batch)
    assert reader.partitions() == [f"{topic}-0", f"{topic}-1"]
    for number in (0, 1):
        records = by_partition[f"{topic}-{number}"]
        assert {r.partition for r in records} == {number}
        assert [r.value["n"] for r in records] == list(range(number, 20, 2))
        assert all(isinstance(r.timestamp_ms, int) for r in records)
    reader.close()
