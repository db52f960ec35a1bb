"""KafkaSink against a real Kafka-protocol broker: what a read_committed consumer
sees after a failure at each phase of an epoch's transaction, at the same and
at another parallelism; fencing; at-least-once; refusals."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from lockgate.runtime import JobDefinitionError, JobIdentity, KafkaSink, SinkWriter, SubtaskContext
from lockgate.runtime.connectors.kafka.record_format import RecordFormatError
from lockgate.runtime.connectors.kafka.settings import BROKER_TIMEOUT_S, KafkaConnectorError, KafkaSetupError
from lockgate.runtime.connectors.kafka.sink import transactional_id
from lockgate.runtime.coordination.etcd_server import free_port

from tests.kafka_broker import QUIET, KafkaBroker, kafka_broker
from tests.runtime.recovery.lockgate_process import run

JOB = JobIdentity("default", "kafka-job")
QUIET_PROPERTIES = {"log_level": 3}


def sink(kafka: KafkaBroker, topic: str, **options: Any) -> KafkaSink:
    options.setdefault("properties", QUIET_PROPERTIES)
    options.setdefault("key", lambda record: record["user"])
    return KafkaSink(bootstrap_servers=kafka.bootstrap_servers, topic=topic, **options)


def context(subtask: int = 0, parallelism: int = 1, *, exactly_once: bool = True) -> SubtaskContext:
    return SubtaskContext(JOB, subtask, parallelism, 1, "totals", exactly_once)


class Launches:
    """Which launch coordinates the job, as the control plane answers a task's
    `confirm_launch` (the engine's is `CheckpointControl.confirm_launch`, against etcd)."""

    def __init__(self, current: int) -> None:
        self.current = current
        # What happens once a writer has its answer, before its next step.
        self.after_confirm: Callable[[], None] = lambda: None

    def context(self, launch: int) -> SubtaskContext:
        def confirm() -> None:
            if self.current != launch:
                raise RuntimeError(f"launch {self.current} has replaced launch {launch}")
            self.after_confirm()

        return SubtaskContext(JOB, 0, 1, launch, "totals", confirm_launch=confirm)


def writer(
    kafka: KafkaBroker, topic: str, subtask: int = 0, parallelism: int = 1, **options: Any
) -> SinkWriter:
    created = sink(kafka, topic, **options).create_writer(context(subtask, parallelism))
    created.recover([])
    return created


def records(first: int, count: int, user: str = "u") -> list[dict[str, Any]]:
    return [{"user": f"{user}{n % 3}", "n": n} for n in range(first, first + count)]


def committed_values(kafka: KafkaBroker, topic: str) -> list[int]:
    return sorted(json.loads(value)["n"] for _, _, _, value in kafka.read(topic))


def write_epoch(target: SinkWriter, batch: list[dict[str, Any]], checkpoint: int) -> list[Any]:
    for record in batch:
        target.write(record)
    return target.pre_commit(checkpoint)


def test_an_epoch_is_visible_once_its_checkpoint_completes_keyed_by_the_key_function(
    kafka: KafkaBroker,
) -> None:
    topic = kafka.create_topic(2)
    target = writer(kafka, topic)
    committables = write_epoch(target, records(0, 30), 1)
    assert committed_values(kafka, topic) == [], "nothing is sent before the checkpoint completes"
    target.commit(committables)
    assert committed_values(kafka, topic) == list(range(30))
    keys = {key for _, _, key, _ in kafka.read(topic)}
    assert keys == {b"u0", b"u1", b"u2"}
    target.commit(committables)
    assert committed_values(kafka, topic) == list(range(30)), "committing again sends nothing twice"
    target.close()


def test_a_failure_before_the_checkpoint_leaves_nothing_of_the_epoch(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    first = writer(kafka, topic)
    write_epoch(first, records(0, 10), 1)  # the checkpoint never completes; the writer dies
    second = sink(kafka, topic).create_writer(context())
    second.recover([])
    second.commit(write_epoch(second, records(0, 10), 1))  # the replay after the restore
    assert committed_values(kafka, topic) == list(range(10))
    second.close()


@pytest.mark.parametrize("committed_before_the_failure", [False, True], ids=["pre-committed", "committed"])
def test_a_restore_commits_each_epoch_of_the_checkpoint_once(
    kafka: KafkaBroker, committed_before_the_failure: bool
) -> None:
    """Failed between the checkpoint and the commit, or after the commit but before
    the runtime knew: the restore commits what the broker does not have, once."""
    topic = kafka.create_topic(2)
    first = writer(kafka, topic)
    first.commit(write_epoch(first, records(0, 10), 1))
    committables = write_epoch(first, records(10, 10), 2)
    if committed_before_the_failure:
        first.commit(committables)
    second = sink(kafka, topic).create_writer(context())
    second.recover(committables)
    second.recover(committables)  # a restore that failed at once is restored again
    assert committed_values(kafka, topic) == list(range(20))
    second.commit(write_epoch(second, records(20, 5), 3))
    assert committed_values(kafka, topic) == list(range(25))
    second.close()


def test_after_a_restore_from_an_older_savepoint_reused_checkpoint_ids_are_still_sent(
    kafka: KafkaBroker,
) -> None:
    """A job restored from an older savepoint, where checkpoint ids start again (another
    etcd): an epoch is skipped only when that very epoch was committed."""
    topic = kafka.create_topic(1)
    first = writer(kafka, topic)
    for checkpoint in (1, 2, 3):
        first.commit(write_epoch(first, records(10 * checkpoint, 2), checkpoint))
    first.close()
    rewound = writer(kafka, topic)
    rewound.commit(write_epoch(rewound, records(100, 2), 2))
    pending = write_epoch(rewound, records(200, 2), 3)
    again = sink(kafka, topic).create_writer(context())
    again.recover(pending)
    assert committed_values(kafka, topic) == [10, 11, 20, 21, 30, 31, 100, 101, 200, 201]
    again.close()


@pytest.mark.xfail(
    strict=True,
    reason="tansu 0.6.0 shows the records of aborted transactions to read_committed consumers "
    "(tests/test_kafka_broker.py); Apache Kafka hides them",
)
def test_a_failure_during_the_commit_sends_the_epoch_once(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    first = writer(kafka, topic)
    committables = write_epoch(first, records(0, 10), 1)
    # The commit began: the transaction holds part of the epoch when the process dies.
    dying = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "transactional.id": transactional_id(context(), 0),
            **QUIET,
        }
    )
    dying.init_transactions(30)
    dying.begin_transaction()
    for record in records(0, 4):
        dying.produce(topic, json.dumps(record).encode())
    dying.flush(30)
    second = sink(kafka, topic).create_writer(context())
    second.recover(committables)
    assert committed_values(kafka, topic) == list(range(10))
    second.close()


def test_a_commit_the_broker_acknowledges_but_does_not_show_is_not_taken_as_done(
    kafka: KafkaBroker,
) -> None:
    """A broker that answers a commit before it shows it (tansu holds a transaction
    until the ones overlapping it have ended): a restore that read the marker then
    would send the epoch again. The commit returns only once the marker shows, and
    fails, naming the epoch, when it does not within the transaction timeout."""
    topic = kafka.create_topic(1)
    other = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"{topic}-other", **QUIET}
    )
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, json.dumps({"user": "x", "n": 100}).encode(), partition=0)
    assert other.flush(30) == 0
    properties = {**QUIET_PROPERTIES, "transaction.timeout.ms": 2000}
    first = writer(kafka, topic, properties=properties)
    committables = write_epoch(first, records(0, 10), 1)
    with pytest.raises(KafkaConnectorError, match=r"acknowledged the commit of checkpoint 1's epoch of "):
        first.commit(committables)
    other.commit_transaction(30)
    restored = sink(kafka, topic).create_writer(context())
    restored.recover(committables)
    assert committed_values(kafka, topic) == [*range(10), 100]
    restored.close()
    other.flush(0)


def test_a_commit_the_broker_held_when_its_writer_died_is_not_sent_again_once_every_id_is_fenced(
    kafka: KafkaBroker,
) -> None:
    """Subtask 0 committed its epoch while subtask 1's transaction was open (its task
    died sending): tansu holds the commit, and subtask 0 dies waiting for it to show.
    The restore fences both ids before either reads its marker; fencing subtask 1's
    id ends its open transaction, the held commit shows, and nothing is sent twice."""
    topic = kafka.create_topic(1)
    properties = {**QUIET_PROPERTIES, "transaction.timeout.ms": 2000}
    first = writer(kafka, topic, 0, 2, properties=properties)
    checkpoint = [*write_epoch(first, records(0, 10), 1)]
    second = writer(kafka, topic, 1, 2)
    checkpoint += write_epoch(second, records(100, 10), 1)
    dying = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "transactional.id": transactional_id(context(1, 2), 1),
            **QUIET,
        }
    )
    dying.init_transactions(30)
    dying.begin_transaction()
    dying.produce(topic, json.dumps({"user": "u", "n": 999}).encode())
    assert dying.flush(30) == 0
    with pytest.raises(KafkaConnectorError, match=r"did not show it within 2 s"):
        first.commit(checkpoint[:1])
    restored = [sink(kafka, topic).create_writer(context(subtask, 2)) for subtask in (0, 1)]
    for each in restored:  # as Task.run does, once every writer of the launch exists
        each.recover(checkpoint)
    # 999 was in the aborted transaction, which tansu shows (tests/test_kafka_broker.py).
    assert [n for n in committed_values(kafka, topic) if n != 999] == [*range(10), *range(100, 110)]
    for each in restored:
        each.close()
    dying.flush(0)


def test_a_restored_writer_fences_the_one_it_replaces(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    zombie = writer(kafka, topic)
    committables = write_epoch(zombie, records(0, 10), 1)
    successor = sink(kafka, topic).create_writer(context())
    successor.recover(committables)
    late = write_epoch(zombie, records(10, 5), 2)
    with pytest.raises(KafkaConnectorError, match=r"was taken over by another producer"):
        zombie.commit(late)
    assert committed_values(kafka, topic) == list(range(10))
    successor.close()


def test_a_late_writer_of_an_earlier_launch_sends_nothing_and_fences_nobody(kafka: KafkaBroker) -> None:
    """Launch 1's task is held before its writer starts while launch 2 restores the same
    checkpoint and commits two more epochs: the late writer, started then, must not send
    the checkpoint's epoch again, nor stop launch 2."""
    topic = kafka.create_topic(1)
    launches = Launches(current=1)
    first = sink(kafka, topic).create_writer(launches.context(1))
    first.recover([])
    first.commit(write_epoch(first, records(0, 10), 1))
    checkpoint = write_epoch(first, records(10, 10), 2)  # checkpoint 2 completes; the commit is lost
    launches.current = 2
    current = sink(kafka, topic).create_writer(launches.context(2))
    current.recover(checkpoint)
    current.commit(write_epoch(current, records(20, 10), 3))
    current.commit(write_epoch(current, records(30, 10), 4))
    refusal = ""
    try:
        sink(kafka, topic).create_writer(launches.context(1)).recover(checkpoint)
    except KafkaConnectorError as error:
        refusal = str(error)
    assert committed_values(kafka, topic) == list(range(40)), "the late writer sent an epoch again"
    assert "writer of 'lockgate.default.kafka-job.totals.0' for launch 1 sends nothing" in refusal
    current.commit(write_epoch(current, records(40, 10), 5))  # launch 2 was not fenced
    assert committed_values(kafka, topic) == list(range(50))
    current.close()


def test_a_writer_whose_launch_was_replaced_starts_no_transaction(kafka: KafkaBroker) -> None:
    """A task of a failed launch can still be told a checkpoint completed after the job
    master gave up on the launch. Its commit, begun then, runs into the next launch's
    restore, which fences the id and aborts the transaction half sent (a broker that
    shows aborted records, as tansu does, then shows the epoch twice). So a writer
    asks before each transaction whether its launch still coordinates the job."""
    topic = kafka.create_topic(1)
    launches = Launches(current=1)
    first = sink(kafka, topic).create_writer(launches.context(1))
    first.recover([])
    first.commit(write_epoch(first, records(0, 10), 1))
    checkpoint = write_epoch(first, records(10, 10), 2)  # checkpoint 2 completes
    launches.current = 2  # the launch failed: launch 2 is starting
    with pytest.raises(KafkaConnectorError, match=r"for launch 1 sends nothing: launch 2 has replaced"):
        first.commit(checkpoint)
    uncommitted = sorted(json.loads(value)["n"] for _, _, _, value in kafka.read(topic, "read_uncommitted"))
    assert uncommitted == list(range(10)), "the writer of a replaced launch sent records"
    current = sink(kafka, topic).create_writer(launches.context(2))
    current.recover(checkpoint)
    assert committed_values(kafka, topic) == list(range(20))
    current.close()


def test_a_launch_that_starts_while_a_late_writer_fences_restarts_and_loses_nothing(
    kafka: KafkaBroker,
) -> None:
    """The race: launch 1's late writer finds its launch current, then launch 2 starts and
    commits, then launch 1's writer fences launch 2's producer. It sends nothing; launch 2's
    next commit fails, and launch 3, restored from launch 2's checkpoint, commits the rest."""
    topic = kafka.create_topic(1)
    launches = Launches(current=1)
    first = sink(kafka, topic).create_writer(launches.context(1))
    first.recover([])
    checkpoint = write_epoch(first, records(0, 10), 1)
    started: list[SinkWriter] = []

    def launch_2_starts_while_launch_1_asks() -> None:
        if launches.current == 2:
            return
        launches.current = 2
        started.append(sink(kafka, topic).create_writer(launches.context(2)))
        started[0].recover(checkpoint)
        started[0].commit(write_epoch(started[0], records(10, 10), 2))

    launches.after_confirm = launch_2_starts_while_launch_1_asks
    with pytest.raises(KafkaConnectorError, match=r"for launch 1 sends nothing: launch 2 has replaced"):
        sink(kafka, topic).create_writer(launches.context(1))
    launches.after_confirm = lambda: None
    fenced = started[0]
    checkpoint_3 = write_epoch(fenced, records(20, 10), 3)  # checkpoint 3 completes
    with pytest.raises(KafkaConnectorError, match=r"taken over by another producer"):
        fenced.commit(checkpoint_3)
    launches.current = 3
    restarted = sink(kafka, topic).create_writer(launches.context(3))
    restarted.recover(checkpoint_3)
    assert committed_values(kafka, topic) == list(range(30))
    restarted.close()


@pytest.mark.parametrize(("old", "new"), [(2, 1), (2, 3)])
def test_at_another_parallelism_every_old_subtask_epoch_is_committed_once(
    kafka: KafkaBroker, old: int, new: int
) -> None:
    topic = kafka.create_topic(3)
    writers = [writer(kafka, topic, subtask, old) for subtask in range(old)]
    committables: list[Any] = []
    for subtask, target in enumerate(writers):
        target.commit(write_epoch(target, records(100 * subtask, 5), 1))
        committables += write_epoch(target, records(100 * subtask + 5, 5), 2)
    writers[0].commit(committables[:1])  # subtask 0 committed epoch 2; subtask 1 did not
    restored = [sink(kafka, topic).create_writer(context(subtask, new)) for subtask in range(new)]
    for target in restored:
        target.recover(committables)
    assert committed_values(kafka, topic) == [*range(10), *range(100, 110)]
    for target in restored:
        target.close()


def partitions_by_writer(kafka: KafkaBroker, topic: str) -> dict[int, set[int]]:
    """Partition -> the writers whose records it holds (record n came from writer n // 100)."""
    found: dict[int, set[int]] = {}
    for partition, _, _, value in kafka.read(topic):
        found.setdefault(partition, set()).add(json.loads(value)["n"] // 100)
    return found


def test_partitioned_by_subtask_each_subtask_writes_its_own_partition_also_what_a_restore_sends_again(
    kafka: KafkaBroker,
) -> None:
    """Restored at parallelism 1, the writer sends old subtask 1's epoch again to
    partition 1, where subtask 1 wrote, not to its own."""
    topic = kafka.create_topic(3)
    writers = [writer(kafka, topic, subtask, 2, partitioning="subtask") for subtask in range(2)]
    committables: list[Any] = []
    for subtask, target in enumerate(writers):
        target.commit(write_epoch(target, records(100 * subtask, 5), 1))
        committables += write_epoch(target, records(100 * subtask + 5, 5), 2)
    assert partitions_by_writer(kafka, topic) == {0: {0}, 1: {1}}
    restored = sink(kafka, topic, partitioning="subtask").create_writer(context(0, 1))
    restored.recover(committables)
    assert committed_values(kafka, topic) == [*range(10), *range(100, 110)]
    assert partitions_by_writer(kafka, topic) == {0: {0}, 1: {1}}
    for target in [*writers, restored]:
        target.close()
    # At-least-once too; more subtasks than partitions wrap around.
    topic = kafka.create_topic(2)
    for subtask in range(3):
        target = sink(kafka, topic, partitioning="subtask").create_writer(
            context(subtask, 3, exactly_once=False)
        )
        for record in records(100 * subtask, 5):
            target.write(record)
        target.pre_commit(1)
        target.close()
    assert partitions_by_writer(kafka, topic) == {0: {0, 2}, 1: {1}}


def test_at_least_once_sends_as_it_goes_and_the_barrier_waits_for_every_acknowledgement(
    kafka: KafkaBroker,
) -> None:
    topic = kafka.create_topic(1)
    target = sink(kafka, topic, value_format="string", key=None).create_writer(context(exactly_once=False))
    target.recover([])
    for n in range(50):
        target.write(str(n))
    assert target.pre_commit(1) == []
    assert sorted(int(v) for _, _, _, v in kafka.read(topic)) == list(range(50))
    target.close()


def test_a_record_not_in_the_value_format_or_a_bad_key_names_the_sink(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(1)
    as_bytes = writer(kafka, topic, value_format="bytes", key=None)
    with pytest.raises(RecordFormatError, match=r"Kafka sink 'totals' writes bytes .* got str"):
        as_bytes.write("text")
    as_bytes.close()
    bad_key = writer(kafka, topic, key=lambda record: record["n"])
    with pytest.raises(RecordFormatError, match=r"Kafka sink 'totals': key= returned int 0"):
        bad_key.write({"user": "u", "n": 0})
    bad_key.close()


def test_an_unreachable_broker_a_missing_topic_and_a_bad_property_are_refused_by_validate(
    kafka: KafkaBroker,
) -> None:
    topic = kafka.create_topic(1)
    started = time.monotonic()
    with pytest.raises(KafkaSetupError, match=r"cannot reach Kafka at 127.0.0.1:1: every broker refused"):
        KafkaSink(bootstrap_servers="127.0.0.1:1", topic=topic, properties=QUIET_PROPERTIES).validate(JOB)
    assert time.monotonic() - started < BROKER_TIMEOUT_S / 2, "a refused connection is not waited out"
    # A broker that accepts connections and never answers is waited for, up to the bound.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        servers = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(KafkaSetupError, match=rf"cannot reach Kafka at {servers}: no answer within 10 s"):
            KafkaSink(bootstrap_servers=servers, topic=topic, properties=QUIET_PROPERTIES).validate(JOB)
        assert time.monotonic() - started >= BROKER_TIMEOUT_S
    with pytest.raises(KafkaSetupError, match=r"topic 'missing-topic' .* does not exist"):
        sink(kafka, "missing-topic").validate(JOB)
    with pytest.raises(JobDefinitionError, match=r"no\.such\.property"):
        sink(kafka, topic, properties={"no.such.property": "x"}).validate(JOB)
    sink(kafka, topic).validate(JOB)


def test_validate_waits_for_a_broker_that_refused_connections_and_then_started(tmp_path: Path) -> None:
    """A broker restarting: refused for 2.5 s, longer than the 2 s after which brokers
    that all refuse are taken as unreachable, then up. librdkafka reports no recovery
    after "every broker down", so only an attempt that fails with connections still
    failing counts; the one under way when the broker comes up gets its answer."""
    port = free_port()
    servers = f"127.0.0.1:{port}"
    outcome: list[BaseException | None] = []

    def validate() -> None:
        try:
            # Reconnecting at least every 200 ms, not librdkafka's up to 10 s: the test's length.
            properties = {**QUIET_PROPERTIES, "reconnect.backoff.max.ms": 200}
            KafkaSink(bootstrap_servers=servers, topic="missing", properties=properties).validate(JOB)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome.append(error)

    asking = threading.Thread(target=validate)
    asking.start()
    time.sleep(2.5)  # the fault: no broker for this long while validate asks
    with kafka_broker(tmp_path / "tansu.log", port):
        asking.join(timeout=30)
    assert len(outcome) == 1
    assert isinstance(outcome[0], KafkaSetupError), outcome
    assert "topic 'missing'" in str(outcome[0]), "the broker was reached: the topic is what is refused"


@pytest.mark.parametrize(
    ("options", "culprit"),
    [
        ({"bootstrap_servers": ""}, "bootstrap_servers"),
        ({"topic": ["a"]}, "topic"),
        ({"key": "user"}, "KafkaSink key"),
        ({"value_format": "avro"}, "value_format"),
        ({"partitioning": "round-robin"}, "KafkaSink partitioning must be one of 'key', 'subtask'"),
        ({"properties": {"transactional.id": "mine"}}, "'transactional.id' is set by Lockgate"),
    ],
)
def test_arguments_of_the_wrong_type_or_value_name_the_argument(
    options: dict[str, Any], culprit: str
) -> None:
    arguments: dict[str, Any] = {"bootstrap_servers": "k:9092", "topic": "t", **options}
    with pytest.raises(JobDefinitionError, match=culprit):
        KafkaSink(**arguments)


def test_lockgate_run_refuses_a_missing_output_topic_before_anything_starts(
    tmp_path: Path, kafka: KafkaBroker
) -> None:
    source = kafka.create_topic(1)
    arguments = ["--arg", f"bootstrap={kafka.bootstrap_servers}", "--arg", f"input={source}"]
    result = run(tmp_path, "run", "examples.kafka_sums:build", *arguments, "--arg", "output=no-such-topic")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "sink 'sums': KafkaSink: topic 'no-such-topic'" in result.stderr
    assert "does not exist; create it first" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".lockgate").exists(), "no etcd or Spark was started"


def test_a_broker_gone_silent_during_the_commit_fails_the_commit_in_time_and_the_restore_sends_it_once(
    tmp_path: Path,
) -> None:
    """A broker (or the network to it) that stops answering without closing: the
    commit fails after `transaction.timeout.ms`, naming the transaction, instead of
    hanging the task; once the broker answers again the restore sends the epoch once."""
    with kafka_broker(tmp_path / "tansu.log") as silent:
        topic = silent.create_topic(1)
        properties = {**QUIET_PROPERTIES, "transaction.timeout.ms": 3000}
        target = writer(silent, topic, properties=properties)
        committables = write_epoch(target, records(0, 10), 1)
        silent.pause()
        started = time.monotonic()
        try:
            with pytest.raises(
                KafkaConnectorError,
                match=r"transaction \w+ of 'lockgate\.default\.kafka-job\.totals\.0' failed",
            ):
                target.commit(committables)
        finally:
            silent.resume()
        assert time.monotonic() - started < 30, "the commit waited far past the transaction timeout"
        restored = sink(silent, topic, properties=properties).create_writer(context())
        restored.recover(committables)
        assert committed_values(silent, topic) == list(range(10))
        restored.close()
