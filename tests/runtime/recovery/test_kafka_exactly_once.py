"""Kafka to Kafka on Spark, exactly once through failures: what a read_committed
consumer of the output sees equals the reference, each record once.

- A Python worker killed mid-stream at P = 2 while input keeps arriving, the job
  stopped with a savepoint, more input produced, the job resumed at P = 3 and
  read to the end it saw at start (`stop_at="latest"`).
- A task process dying at each phase of an epoch's transaction: before the
  pre-commit, between the pre-commit and the commit, after the commit before
  the runtime knew. (Dying during the commit: tests/runtime/connectors/kafka,
  marked, since the tests' broker shows aborted transactions.)
- A message that is not JSON in the input: set aside with `dead_letter=`, the rest
  exact; without it, the job stops at once, its last word naming the message."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.keys import JobKeys

from tests.exactness import assert_running_sums_exact
from tests.jobs.kafka_sums import PHASES
from tests.kafka_broker import KafkaBroker
from tests.process_tree import python_task_workers
from tests.runtime.recovery.lockgate_process import (
    finish,
    fixed_delay_restarts,
    restarts,
    run,
    run_record,
    start,
    wait_for,
)

KEYS = 23
JOB = JobKeys("default", "ksums")
PARTITIONS = 4
SINK_PARTITIONS = 3  # one per sink subtask, up to P = 3: the job's sink partitions by subtask

pytestmark = pytest.mark.slow


def produce_numbers(kafka: KafkaBroker, topic: str, first: int, count: int) -> None:
    kafka.produce_numbers(topic, first, count, keys=KEYS, partitions=PARTITIONS)


def committed_sums(kafka: KafkaBroker, topic: str) -> list[dict[str, Any]]:
    return [json.loads(value) for _, _, _, value in kafka.read(topic)]


def assert_kafka_sums_exact(kafka: KafkaBroker, topic: str, count: int, run_output: str) -> None:
    """The committed output is exact; if not, the failure also says which of the
    lost records the topic holds uncommitted, and what the last run printed."""
    committed = committed_sums(kafka, topic)
    try:
        assert_running_sums_exact(committed, count, KEYS)
    except AssertionError as failure:
        lost = set(range(count)) - {record["n"] for record in committed}
        uncommitted = [json.loads(value)["n"] for _, _, _, value in kafka.read(topic, "read_uncommitted")]
        written = sorted(lost & set(uncommitted))
        failure.add_note(
            f"of the {len(lost)} lost, {len(written)} are in {topic} read uncommitted ({written[:10]}); "
            f"read uncommitted holds {len(uncommitted)} records, read committed {len(committed)}; "
            f"lost by input partition: {Counter(n % PARTITIONS for n in lost)}; "
            f"the last run printed: {run_output[-4000:]}"
        )
        raise


def job(kafka: KafkaBroker, topics: tuple[str, str], parallelism: int, *flags: str) -> list[str]:
    source, sink = topics
    return [
        "run",
        "tests.jobs.kafka_sums:running_sum",
        "--job-id",
        "ksums",
        "-p",
        str(parallelism),
        "--checkpoint-interval",
        "0.3",
        *fixed_delay_restarts(5),
        "--arg",
        f"bootstrap={kafka.bootstrap_servers}",
        "--arg",
        f"input={source}",
        "--arg",
        f"output={sink}",
        *flags,
    ]


def test_killed_stopped_and_resumed_at_another_parallelism_kafka_output_is_exactly_once(
    tmp_path: Path, kafka: KafkaBroker
) -> None:
    topics = (kafka.create_topic(PARTITIONS, "numbers"), kafka.create_topic(SINK_PARTITIONS, "sums"))
    produced = [0]  # records produced so far: numbers 0 .. produced[0] - 1
    stop_producing = threading.Event()

    def keep_producing() -> None:
        """Input at about 1,000 records/s until the job is stopped, so that the kill and
        the stop come while input still arrives."""
        while not stop_producing.is_set():
            produce_numbers(kafka, topics[0], produced[0], 250)
            produced[0] += 250
            stop_producing.wait(0.25)  # pacing of the input, not a synchronisation

    def written() -> int:
        return kafka.progress(topics[1])

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        log = tmp_path / "run.log"
        process = start(tmp_path, *job(kafka, topics, 2), "-v", stderr_to=log)
        wait_for(lambda: written() > 0, "output", process)
        wait_for(lambda: len(python_task_workers(process.pid)) >= 2, "two task workers", process)
        _kill_a_task_worker_between_transactions(process.pid, kafka, topics[1])
        try:
            wait_for(lambda: restarts(tmp_path, JOB) >= 1, "the restart", process)
            before = written()
            wait_for(lambda: written() > before, "output after the restart", process)
        except AssertionError as failure:
            failure.add_note(_what_the_broker_shows(kafka, topics[1]) + "\nthe run's log:\n" + _tail(log))
            process.kill()
            raise
        assert run_record(tmp_path) is not None
        savepoint = run(tmp_path, "savepoint", "ksums", "--stop")
        assert savepoint.returncode == 0, savepoint.stderr
        path = savepoint.stdout.strip().splitlines()[-1]
        out, _ = finish(process)
        assert "1 restart(s)" in out
    finally:
        stop_producing.set()
        producer.join()
    streamed, later = produced[0], 4_000
    assert len(committed_sums(kafka, topics[1])) < streamed + later, "the job was stopped mid-stream"

    produce_numbers(kafka, topics[0], streamed, later)
    last = run(
        tmp_path, *job(kafka, topics, 3, "--from-savepoint", path, "--bounded", "--arg", "stop_at=latest")
    )
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {path}" in last.stdout
    assert_kafka_sums_exact(
        kafka,
        topics[1],
        streamed + later,
        f"{last.stdout}{last.stderr[-1500:]}\nthe killed run's restores:\n{_restores(log)}",
    )


def _kill_a_task_worker_between_transactions(root: int, kafka: KafkaBroker, topic: str) -> None:
    """SIGKILL a task worker at a moment the broker holds no transaction of the sink
    open (`KafkaBroker.between_transactions` says why), every task worker frozen
    while the broker is asked."""
    killed = kafka.between_transactions(
        topic, lambda: python_task_workers(root), lambda frozen: os.kill(frozen[0], signal.SIGKILL)
    )
    assert killed is not None, f"a transaction of the sink on {topic} was open at every try"


def _what_the_broker_shows(kafka: KafkaBroker, topic: str) -> str:
    """For a run that stopped writing: what the output topic holds committed and not,
    and each sink id's marker (its last epoch committed, as the broker shows it)."""
    committed, everything = len(kafka.read(topic)), len(kafka.read(topic, "read_uncommitted"))
    markers = {}
    for subtask in range(3):
        group = f"lockgate.default.ksums.sums.{subtask}"  # the sink vertex `sums` of job ksums
        markers[group] = kafka.committed_offset(group, topic, 0)
    return f"{topic}: {committed} records read committed, {everything} read uncommitted; markers {markers}"


def _restores(log: Path) -> str:
    """What the killed run's log says of its restore: the checkpoint restored, and
    what each sink writer found committed and sent again."""
    lines = log.read_text().splitlines()
    return "\n".join(line for line in lines if "restores checkpoint" in line or "KafkaSink:" in line)


def _tail(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if not line.startswith("%")]
    return "\n".join(lines[-60:])


@pytest.mark.parametrize("phase", PHASES)
def test_a_task_dying_at_each_phase_of_the_transaction_loses_and_duplicates_nothing(
    tmp_path: Path, kafka: KafkaBroker, phase: str
) -> None:
    topics = (kafka.create_topic(PARTITIONS, "numbers"), kafka.create_topic(SINK_PARTITIONS, "sums"))
    count = 6_000
    produce_numbers(kafka, topics[0], 0, count)
    flag = tmp_path / "crashed"
    flags = ("--bounded", "--arg", "stop_at=latest", "--arg", f"crash_at={phase}", "--arg", f"flag={flag}")
    result = run(tmp_path, *job(kafka, topics, 2, *flags))
    assert result.returncode == 0, result.stderr[-4000:]
    assert flag.exists(), f"no task died {phase}"
    assert "1 restart(s)" in result.stdout
    assert_kafka_sums_exact(kafka, topics[1], count, result.stdout + result.stderr)


def test_a_poison_message_goes_to_the_dead_letters_or_stops_the_job_naming_it(
    tmp_path: Path, kafka: KafkaBroker
) -> None:
    topics = (kafka.create_topic(PARTITIONS, "numbers"), kafka.create_topic(SINK_PARTITIONS, "sums"))
    produce_numbers(kafka, topics[0], 0, 3_000)
    kafka.produce(topics[0], [b"\xff{not json"], partition_of=lambda _: 1)  # offset 750 of partition 1
    produce_numbers(kafka, topics[0], 3_000, 3_000)
    bounded = ("--bounded", "--arg", "stop_at=latest")

    (tmp_path / "fail").mkdir()
    failed = run(tmp_path / "fail", *job(kafka, topics, 2, *bounded))
    assert failed.returncode == 1, failed.stderr[-4000:]
    assert "restart 1" not in failed.stderr, "no restart can read the message"
    final = failed.stderr.strip().splitlines()[-1]
    assert f"the message at topic '{topics[0]}' partition 1 offset 750 is not 'json'" in final, final
    assert "Set dead_letter=URL on the KafkaSource" in final, final
    assert "py4j" not in failed.stderr.lower(), failed.stderr[-4000:]
    assert "Traceback" not in failed.stderr, failed.stderr[-4000:]

    # The failed run may have committed sums before it stopped: the next run writes
    # to a topic of its own.
    topics = (topics[0], kafka.create_topic(SINK_PARTITIONS, "sums"))
    (tmp_path / "skip").mkdir()
    dead = f"file://{tmp_path}/dead"
    skipped = run(tmp_path / "skip", *job(kafka, topics, 2, *bounded, "--arg", f"dead_letter={dead}"))
    assert skipped.returncode == 0, skipped.stderr[-4000:]
    (letter,) = read_committed(dead)
    assert (letter["topic"], letter["partition"], letter["offset"]) == (topics[0], 1, 750)
    assert letter["value"] == "\ufffd{not json"
    assert_kafka_sums_exact(kafka, topics[1], 6_000, skipped.stdout + skipped.stderr)
