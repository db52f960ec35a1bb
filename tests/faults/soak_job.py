"""The soak's job: a keyed running sum over an appended log, into a two-phase-commit
file sink, with its storage behind `faulty://` (imported here so that every Spark
Python worker that builds the job registers the protocol).

    --arg input=URL      a LogSource directory the harness appends to
    --arg output=URL     the FileSink directory
    --arg kafka=SERVERS  also a KafkaSink of the same sums, to topic `--arg topic=NAME`,
                         its writers held on the harness's word (`--arg hold=DIR`,
                         tests/faults/late_writer.py)

Record {"n", "key"} gives {"key", "n", "sum"}, "sum" the running total of the key.
The harness writes all records of a key into one input partition, in increasing
n, so each output record is determined: the soak's reference is exact."""

from __future__ import annotations

from lockgate.runtime import FileSink, KafkaSink, LogSource, StreamEnvironment

import tests.faults.faulty_fs  # noqa: F401 - registers faulty:// in this process
from tests.faults.late_writer import HeldKafkaSink
from tests.jobs.functions import RunningSum

QUIET = {"log_level": 3}


def running_sum(env: StreamEnvironment) -> None:
    args = env.args
    sums = (
        env.source(LogSource(args["input"]), name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
    )
    sums.sink(FileSink(args["output"]), name="out")
    if "kafka" in args:
        # partitioning="subtask": on tansu 0.6.0, transactions of several writers on one
        # partition can wedge it for good (tests/test_kafka_broker.py, docs/operations.md).
        kafka = KafkaSink(
            args["kafka"],
            args["topic"],
            key=lambda record: str(record["key"]),
            partitioning="subtask",
            properties=QUIET,
        )
        sums.sink(HeldKafkaSink(kafka, args["hold"]), name="kafka-out")
