"""The Kafka transactions of one sink subtask's transactional id, one per epoch,
each marking itself as committed.

librdkafka cannot resume a transaction another producer opened: a transaction
left open by a crash is aborted when a new producer of the same transactional
id starts (`init_transactions`, which also fences the old producer for good).
So an epoch's records are not sent while the epoch runs; the writer keeps them,
the checkpoint holds them as the sink's committable, and the whole epoch is
sent in one short transaction once the checkpoint is complete.

Inside that transaction the writer commits an offset for a consumer group of
its own (named as the transactional id) on partition 0 of the topic: the
epoch's marker, its checkpoint id and a random number drawn when it was
pre-committed. Kafka makes it visible atomically with the records. After a
restore, the writer of each old subtask's id first fences it, then reads the
marker: the epochs the checkpoint holds up to the one it names were committed,
the later ones are sent again. A marker that names none of them (the job was
restored from an older checkpoint or savepoint, whose checkpoint ids may come
again) means none was: an epoch is skipped only when this very epoch is known
committed, never because of its number. Whatever failed (before the
checkpoint, between it and the commit, during the commit) a `read_committed`
consumer sees each epoch once.

Only a writer of the launch that coordinates the job may do this. A task can be
held before its writer starts (a GC pause, a frozen executor) while the next
launch restores the same checkpoint and commits further epochs; started then,
its `init_transactions` would fence the current producer and, finding a marker
its checkpoint does not name, send an epoch the broker already has. So the
writer asks the control plane whether its launch is still current before
`init_transactions` (a late writer fences nobody) and again after it (a launch
that began in between initialised its producer either after this one, and
fenced it, or before, and was fenced by it: then this check fails, and that
launch's next transaction step is refused, so it restarts from its checkpoint,
losing nothing); only then does it read the marker and send. It asks again
before each transaction: a task of a failed launch can still hear that a
checkpoint completed, and its transaction, begun after the job master gave the
launch up, would run into the next launch's restore, which fences the id and
aborts it half sent (Apache Kafka hides the aborted records; tansu shows them).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lockgate.runtime.connectors.kafka.settings import KafkaConnectorError, kafka_client, make_client

TRANSACTION_TIMEOUT_S = 60.0
"""How long the broker lets a transaction stay open, unless the sink's properties
set `transaction.timeout.ms`; also how long a step of a transaction (start,
commit, reading the marker) may wait for a broker that does not answer."""

_CREDENTIALS = ("security.", "sasl.", "ssl.")
_FENCED_CODES = ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")


Records = list[tuple[bytes | None, bytes]]


@dataclass(frozen=True)
class Epoch:
    """The records a subtask wrote between two barriers, pre-committed at `checkpoint`."""

    subtask: int
    checkpoint: int
    nonce: int  # drawn at the pre-commit: tells this epoch from another with its number
    records: Records

    @staticmethod
    def seal(subtask: int, checkpoint: int, records: Records) -> Epoch:
        return Epoch(subtask, checkpoint, secrets.randbits(32), records)

    @property
    def marker(self) -> int:
        return self.checkpoint << 32 | self.nonce

    def to_committable(self) -> dict[str, Any]:
        return {
            "subtask": self.subtask,
            "checkpoint": self.checkpoint,
            "nonce": self.nonce,
            "records": self.records,
        }

    @staticmethod
    def from_committable(data: dict[str, Any]) -> Epoch:
        return Epoch(int(data["subtask"]), int(data["checkpoint"]), int(data["nonce"]), data["records"])


class EpochTransactions:
    """Transactions of transactional id `transactional_id`, on `topic`, for the launch
    `confirm_launch` checks (it raises once that launch no longer coordinates the job)."""

    def __init__(
        self,
        config: dict[str, str],
        transactional_id: str,
        topic: str,
        confirm_launch: Callable[[], None],
        launch: int,
    ) -> None:
        self._kafka = kafka_client()
        self.transactional_id = transactional_id
        self._topic = topic
        self._launch = launch
        self._confirm_launch = confirm_launch
        self._confirm_current()
        timeout_ms = config.get("transaction.timeout.ms", str(int(TRANSACTION_TIMEOUT_S * 1000)))
        self._timeout_s = int(timeout_ms) / 1000
        producer_config = {
            **config,
            "transactional.id": transactional_id,
            "enable.idempotence": "true",
            "transaction.timeout.ms": timeout_ms,
        }
        self._producer: Any = make_client(self._kafka.Producer, producer_config, "KafkaSink")
        marker_config = {
            "bootstrap.servers": config["bootstrap.servers"],
            "group.id": transactional_id,
            "enable.auto.commit": "false",
        }
        # The marker group is read from the same brokers, as the same principal.
        marker_config.update({k: v for k, v in config.items() if k.startswith(_CREDENTIALS)})
        self._marker_group: Any = make_client(self._kafka.Consumer, marker_config, "KafkaSink")
        self.partition = -1  # where the records go: -1, as the producer's partitioner places them
        self._call(lambda: self._producer.init_transactions(self._timeout_s), "start")
        try:
            self._confirm_current()
        except KafkaConnectorError:
            self.close()
            raise
        # Of the last epoch this id committed (negative: none), read when first needed:
        # after every id of the launch was fenced (TransactionalKafkaWriter.recover).
        self._marker: int | None = None

    @property
    def producer(self) -> Any:
        return self._producer

    def read_marker(self) -> None:
        """Reads which epoch this id committed last, as the broker shows it now."""
        tp = self._kafka.TopicPartition(self._topic, 0)
        group = self._marker_group
        found = self._call(lambda: group.committed([tp], timeout=self._timeout_s), "read marker")
        self._marker = int(found[0].offset)

    @property
    def _last_marker(self) -> int:
        if self._marker is None:
            self.read_marker()
        assert self._marker is not None
        return self._marker

    def last_committed(self) -> str:
        """The last epoch committed, as the broker shows it, in words."""
        marker = self._last_marker
        if marker < 0:
            return "no epoch committed"
        return f"checkpoint {marker >> 32}'s epoch (nonce {marker & 0xFFFFFFFF:#x}) committed last"

    def _confirm_current(self) -> None:
        try:
            self._confirm_launch()
        except Exception as error:  # deposed, or the control plane cannot say: either way, stop
            raise KafkaConnectorError(
                f"KafkaSink: the writer of {self.transactional_id!r} for launch {self._launch} sends "
                f"nothing: {error}"
            ) from error

    def uncommitted(self, epochs: Iterable[Epoch]) -> list[Epoch]:
        """Of a checkpoint's epochs of this id, those the broker has not committed."""
        ordered = sorted(epochs, key=lambda epoch: epoch.checkpoint)
        markers = [epoch.marker for epoch in ordered]
        if self._last_marker in markers:
            return ordered[markers.index(self._last_marker) + 1 :]
        return ordered

    def commit(self, epoch: Epoch) -> None:
        """Sends `epoch` in one transaction, unless it is the last one committed."""
        if epoch.marker == self._last_marker:
            return
        # A task of a failed launch can still hear that a checkpoint completed; its
        # transaction would then run into the next launch's restore.
        self._confirm_current()
        producer = self._producer
        produce, topic, partition = producer.produce, self._topic, self.partition
        self._call(producer.begin_transaction, "begin")
        for key, value in epoch.records:
            while True:
                try:
                    produce(topic, value, key, partition)
                    break
                except BufferError:  # the local queue is full: let librdkafka send some
                    producer.poll(0.05)
        marker = [self._kafka.TopicPartition(topic, 0, epoch.marker)]
        metadata = self._marker_group.consumer_group_metadata()
        self._call(lambda: producer.send_offsets_to_transaction(marker, metadata, self._timeout_s), "mark")
        self._call(lambda: producer.commit_transaction(self._timeout_s), "commit")
        self._await_marker(epoch)
        self._marker = epoch.marker

    def _await_marker(self, epoch: Epoch) -> None:
        """Returns once the broker shows `epoch`'s marker: a broker may acknowledge a
        commit before it shows it (tansu holds a transaction until those that wrote
        to its partitions meanwhile have ended), and a restore that read the older
        marker then would send the epoch again."""
        tp = self._kafka.TopicPartition(self._topic, 0)
        group = self._marker_group
        deadline = time.monotonic() + self._timeout_s
        pause = 0.002
        while True:
            remaining = deadline - time.monotonic()
            wait = max(remaining, 0.1)
            found = self._call(lambda wait=wait: group.committed([tp], timeout=wait), "read marker")
            if int(found[0].offset) == epoch.marker:
                return
            if remaining <= 0:
                raise KafkaConnectorError(
                    f"KafkaSink: the broker acknowledged the commit of checkpoint {epoch.checkpoint}'s "
                    f"epoch of {self.transactional_id!r} but did not show it within "
                    f"{self._timeout_s:g} s (transaction.timeout.ms); the job restarts from its last "
                    "checkpoint, and the restore sends the epoch only if the broker still does not "
                    "show it"
                )
            time.sleep(min(pause, remaining))  # polling the broker: it has no notification
            pause = min(pause * 2, 0.1)

    def _call(self, step: Any, what: str) -> Any:
        try:
            return step()
        except self._kafka.KafkaException as exception:
            error = exception.args[0]
            if error.name() in _FENCED_CODES:
                raise KafkaConnectorError(
                    f"KafkaSink: transactional id {self.transactional_id!r} was taken over by another "
                    "producer (a newer launch of this job; a late writer of an earlier launch, which "
                    "then stops without sending; or another job writing with the same id): this writer "
                    f"stops and its launch restarts from its last checkpoint ({error.str()})"
                ) from None
            if error.txn_requires_abort():
                # Best effort: the restore's init_transactions aborts it in any case.
                with contextlib.suppress(self._kafka.KafkaException):
                    self._producer.abort_transaction(self._timeout_s)
            raise KafkaConnectorError(
                f"KafkaSink: transaction {what} of {self.transactional_id!r} failed: {error.str()}; "
                "the job restarts from its last checkpoint and sends the epoch again"
            ) from None

    def close(self) -> None:
        self._producer.flush(0)
        self._marker_group.close()
