"""The keyed running sum from Kafka to Kafka, configured by its args (as `lockgate
run tests.jobs.kafka_sums:running_sum --arg k=v` and Spark tasks build it):
records `{"key", "n"}` from topic `input`, `{"key", "n", "sum"}` to topic
`output`, keyed by the key; messages it cannot read go to `dead_letter` if given. With `crash_at=<phase>` and `flag=<file>`, the
sink's process dies once (`os._exit`, as a kill does) at that phase of an
epoch's transaction, while `flag` does not exist yet."""

from __future__ import annotations

import os
from typing import Any

from lockgate.runtime import (
    FileSink,
    ForwardingSinkWriter,
    JobIdentity,
    KafkaSink,
    KafkaSource,
    Sink,
    SinkWriter,
    StreamEnvironment,
    SubtaskContext,
)

from tests.jobs.costly import CostlySum
from tests.jobs.functions import RunningSum

PHASES = ("before-pre-commit", "before-commit", "after-commit")
QUIET = {"log_level": 3}


def _first(flag: str) -> bool:
    """True for the one caller that creates `flag` (O_EXCL: of several subtasks, one)."""
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class _CrashingWriter(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, phase: str, flag: str) -> None:
        super().__init__(inner)
        self.phase, self.flag = phase, flag
        self.written = 0

    def _crash_at(self, phase: str) -> None:
        if phase == self.phase and self.written and not os.path.exists(self.flag) and _first(self.flag):
            os._exit(137)

    def write(self, record: Any) -> None:
        self.inner.write(record)
        self.written += 1

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        self._crash_at("before-pre-commit")
        return self.inner.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        if committables:
            self._crash_at("before-commit")
        self.inner.commit(committables)
        if committables:
            self._crash_at("after-commit")


class CrashingSink(Sink):
    def __init__(self, inner: KafkaSink, phase: str, flag: str) -> None:
        assert phase in PHASES, phase
        self.inner, self.phase, self.flag = inner, phase, flag

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return _CrashingWriter(self.inner.create_writer(context), self.phase, self.flag)


def running_sum(env: StreamEnvironment) -> None:
    args = env.args
    source = KafkaSource(
        bootstrap_servers=args["bootstrap"],
        topics=[args["input"]],
        group_id=args.get("group", "sums"),
        stop_at=args.get("stop_at"),
        dead_letter=args.get("dead_letter"),
        properties=QUIET,
    )
    # partitioning="subtask": on tansu 0.6.0, transactions of several writers on one
    # partition can wedge it for good (tests/test_kafka_broker.py, docs/operations.md).
    sink: Sink = KafkaSink(
        bootstrap_servers=args["bootstrap"],
        topic=args["output"],
        key=lambda record: str(record["key"]),
        partitioning="subtask",
        properties=QUIET,
    )
    if "crash_at" in args:
        sink = CrashingSink(sink, args["crash_at"], args["flag"])
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(sink, name="sums")
    )


def costly_running_sum(env: StreamEnvironment) -> None:
    """Records `{"key", "n"}` from topic `input` summed per key at `cost_ms` a record
    (`costly.CostlySum`), to files at `output`: a job whose keyed stage sets what
    one subtask processes, for the autoscaler's tests. Its consumer prefetches
    little and fetches often: librdkafka does not fetch while its queue is full (by
    default up to 100,000 messages), which would leave the high watermark of the
    last fetch response behind by seconds — longer than these tests' windows (the
    backlog looks the end offsets up too)."""
    args = env.args
    prefetch = {"queued.min.messages": 20, "fetch.wait.max.ms": 100}
    source = KafkaSource(
        bootstrap_servers=args["bootstrap"],
        topics=[args["input"]],
        group_id="sums",
        properties={**QUIET, **prefetch},
    )
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(CostlySum(float(args["cost_ms"]) / 1000, None, 0.0), name="sum")
        .sink(FileSink(args["output"]), name="out")
    )
