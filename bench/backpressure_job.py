"""The job bench/unaligned_checkpoints.py runs: the keyed running sum of
`engine_job.py` into a sink throttled to `sink_rate` records/s in all, behind
sources held to `rate`: with `sink_rate` below `rate`, backpressure all the way.

Each subtask's writer samples records' source stamps per epoch (`pre_commit(n)`
ends epoch n), so the benchmark computes each sampled record's latency to its
commit: the completion of checkpoint n, when exactly-once output becomes visible.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from engine_job import SAMPLE_EVERY, Sum, stamp
from lockgate.runtime import (
    FileSink,
    ForwardingSinkWriter,
    GeneratorSource,
    JobIdentity,
    Sink,
    SinkWriter,
    StreamEnvironment,
    SubtaskContext,
)


class _ThrottledWriter(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, samples: str, context: SubtaskContext, rate: float) -> None:
        super().__init__(inner)
        self.path = os.path.join(samples, f"epochs-{context.launch}-{context.subtask}-{os.getpid()}.json")
        self.interval = 1.0 / rate
        self.due = time.monotonic()
        self.count = 0
        self.sampled: list[float] = []
        self.epochs: dict[int, list[float]] = {}

    def write_batch(self, records: list[Any]) -> None:
        for record in records:
            self.count += 1
            if self.count % SAMPLE_EVERY == 0:
                self.sampled.append(record["t"])
        self.due += len(records) * self.interval
        if (wait := self.due - time.monotonic()) > 0:
            time.sleep(wait)
        else:
            self.due = time.monotonic()  # behind: no credit saved up for later
        self.inner.write_batch(records)

    def write(self, record: Any) -> None:
        self.write_batch([record])

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        self.epochs[checkpoint_id], self.sampled = self.sampled, []
        return self.inner.pre_commit(checkpoint_id)

    def close(self) -> None:
        self.inner.close()
        with open(self.path, "w") as out:
            json.dump({"count": self.count, "epochs": self.epochs}, out)


class ThrottledSink(Sink):
    def __init__(self, inner: Sink, samples: str, rate: float) -> None:
        self.inner = inner
        self.samples = samples
        self.rate = rate  # per subtask

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return _ThrottledWriter(self.inner.create_writer(context), self.samples, context, self.rate)


def build(env: StreamEnvironment) -> None:
    parallelism = int(env.args["parallelism"])
    count = int(env.args["count"])
    source = GeneratorSource(count, keys=int(env.args["keys"]), partitions=8, rate=float(env.args["rate"]))
    sink = ThrottledSink(
        FileSink(env.args["output"]), env.args["samples"], float(env.args["sink_rate"]) / parallelism
    )
    (
        env.source(source, name="numbers")
        .map(stamp, name="stamp")
        .key_by(lambda record: record["key"])
        .process(Sum(), name="sum")
        .sink(sink, name="out")
    )
