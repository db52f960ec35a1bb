"""`KafkaSource`: topic-partitions read from offsets the job keeps in its checkpoints.

A partition is named `<topic>-<partition>` and read by one subtask, chosen as
`partitions.py` chooses (round robin by partition number), so a partition
that appears while the job runs moves no other. Offsets are the next offset to
read, kept in the source's union state: on restore every subtask takes the
offsets of its share, at any parallelism. A fresh start resolves
`starting_offsets` to concrete offsets at once ("committed" falls back to the
earliest offset of a partition the group has none for), so a checkpoint never
holds "latest" and a restore never skips what arrived meanwhile.

The consumer group's committed offsets are written back after each completed
checkpoint, for monitoring (lag dashboards) only; recovery reads the
checkpoint. A restored offset the broker no longer has (retention deleted it)
stops the job naming the partition: skipping to the earliest would lose
records silently. Reads are `read_committed` (librdkafka's default).

`stop_at="latest"` makes the source bounded: each partition is read up to the
end offset it had when the reader opened (or when it was discovered), and the
source is done there.

A message whose value is not in `value_format`, or whose key and value together
are larger than `max_record_bytes` (at most, and by default, the 1 GiB a frame
of the keyed exchange carries), goes to `dead_letter=URL` with its topic,
partition, offset and the reason, and the source reads on; without a
dead-letter location it stops the job, naming the message and the option
(`dead_letters.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lockgate.runtime.api.connectors import (
    EXCHANGE_FRAME_LIMIT_BYTES,
    Backlog,
    JobIdentity,
    Source,
    SourceReader,
    SubtaskContext,
)
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.connectors.dead_letters import DeadLetterPolicy
from lockgate.runtime.connectors.kafka.record_format import UnreadableMessageError, decoder
from lockgate.runtime.connectors.kafka.settings import (
    BROKER_TIMEOUT_S,
    VALUE_FORMATS,
    KafkaConnectorError,
    check_choice,
    check_properties,
    check_text,
    check_topics,
    kafka_client,
    make_client,
)
from lockgate.runtime.connectors.partitions import owner

DISCOVERY_INTERVAL_S = 10.0
"""How often a reader asks the broker for partitions added to its topics."""

END_LOOKUP_INTERVAL_S = 0.25
"""How often `backlog` looks the partitions' end offsets up (one ListOffsets request
for all of them; a task asks for the backlog as often): the fetch responses' end
offset is as old as the last fetch, and a consumer far behind fetches only when
its prefetch queue runs low."""

END_LOOKUP_TIMEOUT_S = 0.5
"""How long a lookup may hold up reading; past it the fetch responses' end stands."""

_SET_ASIDE = object()  # what `_record` returns for a message it routed to the dead letters


@dataclass(frozen=True)
class KafkaRecord:
    """A message with where it came from (`with_metadata=True`)."""

    key: bytes | None
    value: Any
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None


class KafkaSource(Source):
    """Records from Kafka topics, their offsets kept in the checkpoint (not in the consumer
    group)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: list[str],
        group_id: str,
        *,
        starting_offsets: str = "earliest",
        value_format: str = "json",
        stop_at: str | None = None,
        with_metadata: bool = False,
        dead_letter: str | None = None,
        max_record_bytes: int = EXCHANGE_FRAME_LIMIT_BYTES,
        properties: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = check_text("KafkaSource bootstrap_servers", bootstrap_servers)
        if not isinstance(topics, list | tuple) or not topics:
            raise JobDefinitionError(f"KafkaSource topics takes a non-empty list of names, got {topics!r}")
        self.topics = [check_text("KafkaSource topic", topic) for topic in topics]
        self.group_id = check_text("KafkaSource group_id", group_id)
        self.starting_offsets = check_choice(
            "KafkaSource starting_offsets", starting_offsets, ("earliest", "latest", "committed")
        )
        self.value_format = check_choice("KafkaSource value_format", value_format, VALUE_FORMATS)
        self.stop_at = check_choice("KafkaSource stop_at", stop_at, (None, "latest"))
        self.bounded = self.stop_at == "latest"
        if not isinstance(with_metadata, bool):
            raise JobDefinitionError(f"KafkaSource with_metadata takes True or False, got {with_metadata!r}")
        self.with_metadata = with_metadata
        if dead_letter is not None:
            check_text("KafkaSource dead_letter", dead_letter)
        self.dead_letter = DeadLetterPolicy(dead_letter)
        limit = EXCHANGE_FRAME_LIMIT_BYTES
        if (
            isinstance(max_record_bytes, bool)
            or not isinstance(max_record_bytes, int)
            or not 0 < max_record_bytes <= limit
        ):
            raise JobDefinitionError(
                f"KafkaSource max_record_bytes takes a number of bytes from 1 to {limit} (the exchange's "
                f"frame limit), got {max_record_bytes!r}"
            )
        self.max_record_bytes = max_record_bytes
        self.properties = check_properties("KafkaSource", properties)

    def consumer_config(self) -> dict[str, str]:
        """The consumer's configuration: `properties` with what Lockgate sets to keep its
        guarantee."""
        return {
            **self.properties,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
            "isolation.level": "read_committed",
        }

    def validate(self, job: JobIdentity) -> None:
        make_client(kafka_client().Consumer, self.consumer_config(), "KafkaSource").close()
        check_topics("KafkaSource", self.properties, self.bootstrap_servers, self.topics)
        self.dead_letter.validate(job)

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        return KafkaSourceReader(self, context, offsets)


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class KafkaSourceReader(SourceReader):
    def __init__(self, source: KafkaSource, context: SubtaskContext, offsets: dict[str, Any]) -> None:
        self._kafka = kafka_client()
        self._source = source
        self._context = context
        self._decode = decoder(source.value_format)
        self._dead_letters = source.dead_letter.open(context)
        self._consumer: Any = make_client(self._kafka.Consumer, source.consumer_config(), "KafkaSource")
        self._restored = {name: int(offset) for name, offset in offsets.items()}
        self._positions: dict[str, int] = {}  # per assigned partition: the next offset to read
        self._topic_partitions: dict[str, tuple[str, int]] = {}
        self._ends: dict[str, int] = {}  # stop_at="latest": where each partition ends
        self._at_eof: set[str] = set()  # partitions read up to their current end
        self._discover_due = 0.0
        self._looked_up: dict[str, int] = {}  # per partition: the end offset last looked up
        self._lookup_due = 0.0
        self._closed = False
        self._discover()

    # -- partitions ------------------------------------------------------------------

    def _discover(self) -> None:
        """Assigns the partitions of this subtask's share not assigned yet."""
        self._discover_due = time.monotonic() + DISCOVERY_INTERVAL_S
        new: list[tuple[str, str, int]] = []
        for topic in self._source.topics:
            for number in range(self._partition_count(topic)):
                name = partition_name(topic, number)
                mine = owner(name, self._context.parallelism) == self._context.subtask
                if mine and name not in self._positions:
                    new.append((name, topic, number))
        if not new:
            return
        starts = self._start_offsets(new)
        assignments = []
        for name, topic, number in new:
            self._positions[name] = starts[name]
            self._topic_partitions[name] = (topic, number)
            assignments.append(self._kafka.TopicPartition(topic, number, starts[name]))
            if self._source.stop_at == "latest":
                self._ends[name] = self._watermarks(topic, number)[1]
        self._consumer.incremental_assign(assignments)

    def _partition_count(self, topic: str) -> int:
        try:
            metadata = self._consumer.list_topics(topic, timeout=BROKER_TIMEOUT_S)
        except self._kafka.KafkaException as error:
            raise KafkaConnectorError(f"KafkaSource: cannot list partitions of {topic!r}: {error}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise KafkaConnectorError(
                f"KafkaSource: topic {topic!r} cannot be read: {getattr(found, 'error', 'it does not exist')}"
            )
        return len(found.partitions)

    def _watermarks(self, topic: str, number: int) -> tuple[int, int]:
        tp = self._kafka.TopicPartition(topic, number)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=BROKER_TIMEOUT_S, cached=False)
        except self._kafka.KafkaException as error:
            raise KafkaConnectorError(f"KafkaSource: offsets of {topic}-{number}: {error}") from None
        return int(low), int(high)

    def _start_offsets(self, new: list[tuple[str, str, int]]) -> dict[str, int]:
        """Restored offsets where the checkpoint has them; else `starting_offsets`,
        resolved to concrete offsets now."""
        starts: dict[str, int] = {}
        committed: dict[str, int] = {}
        fresh = [(name, topic, number) for name, topic, number in new if name not in self._restored]
        if fresh and self._source.starting_offsets == "committed":
            tps = [self._kafka.TopicPartition(topic, number) for _, topic, number in fresh]
            for tp in self._consumer.committed(tps, timeout=BROKER_TIMEOUT_S):
                if tp.offset >= 0:
                    committed[partition_name(tp.topic, tp.partition)] = tp.offset
        for name, topic, number in new:
            if name in self._restored:
                starts[name] = self._restored[name]
            elif name in committed:
                starts[name] = committed[name]
            else:
                low, high = self._watermarks(topic, number)
                starts[name] = high if self._source.starting_offsets == "latest" else low
        return starts

    def partitions(self) -> list[str]:
        return sorted(self._positions)

    # -- reading ---------------------------------------------------------------------

    def poll(self, max_records: int) -> list[Any]:
        return [record for _, records in self.poll_partitions(max_records) for record in records]

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        if time.monotonic() >= self._discover_due:
            self._discover()
        messages = self._consumer.consume(num_messages=max_records, timeout=0)
        by_partition: dict[str, list[Any]] = {}
        for message in messages:
            error = message.error()
            name = partition_name(message.topic(), message.partition())
            if error is not None:
                self._on_error(name, message, error)
                continue
            offset = message.offset()
            end = self._ends.get(name)
            if end is not None and offset >= end:
                # Everything before `end` has been read: messages come in offset order.
                self._positions[name] = max(self._positions[name], end)
                self._consumer.pause([self._kafka.TopicPartition(message.topic(), message.partition())])
                continue
            self._at_eof.discard(name)
            self._positions[name] = offset + 1
            if (record := self._record(message)) is not _SET_ASIDE:
                by_partition.setdefault(name, []).append(record)
        return list(by_partition.items())

    def _record(self, message: Any) -> Any:
        raw, key = message.value(), message.key()
        size = len(raw or b"") + len(key or b"")
        if size > self._source.max_record_bytes:
            limit = self._source.max_record_bytes
            problem = f"is {size} bytes (key and value), over max_record_bytes={limit}" + (
                ", the most one frame of the keyed exchange carries"
                if limit == EXCHANGE_FRAME_LIMIT_BYTES
                else ""
            )
            return self._set_aside(message, problem, {"bytes": size})
        try:
            value = None if raw is None else self._decode(raw)
        except ValueError as error:
            text = raw.decode("utf-8", "replace")
            return self._set_aside(
                message, f"is not {self._source.value_format!r} ({error})", {"value": text}
            )
        if not self._source.with_metadata:
            return value
        kind, timestamp = message.timestamp()
        return KafkaRecord(
            message.key(),
            value,
            message.topic(),
            message.partition(),
            message.offset(),
            None if kind == self._kafka.TIMESTAMP_NOT_AVAILABLE else timestamp,
        )

    def _set_aside(self, message: Any, problem: str, kept: dict[str, Any]) -> object:
        """`message` to the dead letters, or the job stops (no dead-letter location)."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        where = f"topic {topic!r} partition {partition} offset {offset}"
        refusal = UnreadableMessageError(
            f"KafkaSource: the message at {where} {problem}. The job stops: a restart would read it "
            "again. Set dead_letter=URL on the KafkaSource to write such messages there and read on "
            "(the dead-letter policy; without it, the job fails), or remove the message from the topic"
        )
        key = message.key()
        entry = {
            "source": where,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "error": problem,
            "key": None if key is None else key.decode("utf-8", "replace"),
            **kept,
        }
        self._dead_letters.put(entry, refusal)
        return _SET_ASIDE

    def _on_error(self, name: str, message: Any, error: Any) -> None:
        if error.code() == self._kafka.KafkaError._PARTITION_EOF:
            self._at_eof.add(name)
            # Past transaction markers, the end is further than the last record read.
            self._positions[name] = max(self._positions.get(name, 0), message.offset())
            return
        if error.code() == self._kafka.KafkaError._AUTO_OFFSET_RESET:
            raise KafkaConnectorError(
                f"KafkaSource: partition {name} no longer has offset {self._positions.get(name)} "
                f"({error.str()}): the broker deleted records the job has not read (retention); "
                "reading on from another offset would lose them. Start the job again from a "
                "newer savepoint, or fresh (--fresh) to start from starting_offsets"
            )
        if error.fatal() or not error.retriable():
            raise KafkaConnectorError(f"KafkaSource: reading {name}: {error.str()}")

    def reached_end(self) -> bool:
        if self._source.stop_at == "latest":
            return all(self._positions[name] >= end for name, end in self._ends.items())
        return self._at_eof >= set(self._positions)

    def offsets(self) -> dict[str, Any]:
        return dict(self._positions)

    def backlog(self) -> Backlog | None:
        """Records between each partition's position and its end: the later of the
        end its last fetch response carried and the one last looked up (at most
        END_LOOKUP_INTERVAL_S before). A consumer far behind fetches seldom — on tansu a
        fetch takes all there is, and the next waits until the queue runs low — so
        the fetch's end alone lags by as long as that queue takes to read."""
        if self._closed:
            return None
        if time.monotonic() >= self._lookup_due:
            self._look_up_ends()
        total = 0
        for name, (topic, number) in self._topic_partitions.items():
            tp = self._kafka.TopicPartition(topic, number)
            _, fetched = self._consumer.get_watermark_offsets(tp, cached=True)
            high = max(fetched, self._looked_up.get(name, -1))
            if high < 0:
                return None  # neither fetched nor looked up yet
            total += max(0, high - self._positions[name])
        return Backlog(records=total)

    def _look_up_ends(self) -> None:
        """Each partition's end offset from the broker (its latest offset; the last
        stable one, read_committed). Where the lookup fails, the last one stands."""
        self._lookup_due = time.monotonic() + END_LOOKUP_INTERVAL_S
        latest = [
            self._kafka.TopicPartition(topic, number, self._kafka.OFFSET_END)
            for topic, number in self._topic_partitions.values()
        ]
        if not latest:
            return
        try:
            found = self._consumer.offsets_for_times(latest, timeout=END_LOOKUP_TIMEOUT_S)
        except self._kafka.KafkaException:
            return
        for tp in found:
            name = partition_name(tp.topic, tp.partition)
            if tp.error is None and tp.offset >= 0:
                self._looked_up[name] = max(tp.offset, self._looked_up.get(name, -1))

    # -- the group's committed offsets, for monitoring --------------------------------

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        dead_letters = [{"dead_letters": c} for c in self._dead_letters.pre_commit(checkpoint_id)]
        return [{"group_offsets": dict(self._positions)}, *dead_letters]

    def commit(self, committables: list[Any]) -> None:
        """After a checkpoint completed: its dead letters, and its offsets to the group
        (asynchronously)."""
        self._dead_letters.commit(_dead_letters_of(committables))
        offsets = [c["group_offsets"] for c in committables if "group_offsets" in c]
        if offsets:
            self._commit_group_offsets(offsets[-1])

    def recover(self, committables: list[Any]) -> None:
        self._dead_letters.recover(_dead_letters_of(committables))

    def _commit_group_offsets(self, positions: dict[str, int]) -> None:
        tps = [
            self._kafka.TopicPartition(*self._topic_partitions[name], offset)
            for name, offset in positions.items()
            if name in self._topic_partitions
        ]
        if not tps:
            return
        if not self._closed:
            self._consumer.commit(offsets=tps, asynchronous=True)
            return
        # The final checkpoint completes after the reader closed: a client of its own.
        consumer = make_client(self._kafka.Consumer, self._source.consumer_config(), "KafkaSource")
        try:
            consumer.commit(offsets=tps, asynchronous=False)
        finally:
            consumer.close()

    def close(self) -> None:
        """Ends reading; a checkpoint that completes afterwards still commits its
        offsets to the group, and its dead letters."""
        if not self._closed:
            self._closed = True
            self._consumer.close()


def _dead_letters_of(committables: list[Any]) -> list[Any]:
    return [c["dead_letters"] for c in committables if "dead_letters" in c]
