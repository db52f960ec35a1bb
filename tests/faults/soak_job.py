"""The soak's job: a keyed running sum over an appended log, into a two-phase-commit
file sink, with its storage behind `faulty://` (imported here so that every Spark
Python worker that builds the job registers the protocol).

    --arg input=URL    a LogSource directory the harness appends to
    --arg output=URL   the FileSink directory

Record {"n", "key"} gives {"key", "n", "sum"}, "sum" the running total of the key.
The harness writes all records of a key into one input partition, in increasing
n, so each output record is determined: the soak's reference is exact."""

from __future__ import annotations

from lockgate.runtime import FileSink, LogSource, StreamEnvironment

import tests.faults.faulty_fs  # noqa: F401 - registers faulty:// in this process
from tests.jobs.functions import RunningSum


def running_sum(env: StreamEnvironment) -> None:
    (
        env.source(LogSource(env.args["input"]), name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(env.args["output"]), name="out")
    )
