"""The job the window benchmark runs: a tumbling one-minute count per key over
generated, timestamped clicks (one per millisecond of event time, keys spread by
a multiplicative hash), the source and the sink noting when they started and
ended so the benchmark can tell reading from firing."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    AggregateFunction,
    FileSink,
    ForwardingSinkWriter,
    GeneratorSource,
    JobIdentity,
    Sink,
    SinkWriter,
    StreamEnvironment,
    SubtaskContext,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from lockgate.runtime.api.connectors import SourceReader
from lockgate.runtime.connectors.generator_source import GeneratorReader

EPOCH_MS = 1_700_000_000_000


def click(keys: int) -> Any:
    def record(n: int) -> dict[str, int]:
        return {"key": (n * 2_654_435_761) % 4_294_967_296 % keys, "ts": EPOCH_MS + n}

    return record


class Count(AggregateFunction[Any, int, int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


class _TimedReader(GeneratorReader):
    """Notes when it first read and when it reached the end of its input (the
    moment its subtask sends the final watermark)."""

    def __init__(
        self, source: TimedGenerator, subtask: int, parallelism: int, offsets: dict[str, Any]
    ) -> None:
        super().__init__(source, subtask, parallelism, offsets)
        self._samples = source.samples
        self._subtask = subtask
        self.first = self.end = 0.0

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        if not self.first:
            self.first = time.time()
        return super().poll_partitions(max_records)

    def reached_end(self) -> bool:
        ended = super().reached_end()
        if ended and not self.end:
            self.end = time.time()
            path = os.path.join(self._samples, f"source-{self._subtask}-{os.getpid()}.json")
            with open(path, "w") as out:
                json.dump({"first": self.first, "end": self.end}, out)
        return ended


class TimedGenerator(GeneratorSource):
    def __init__(self, count: int, keys: int, samples: str) -> None:
        super().__init__(count, partitions=8, record_fn=click(keys))
        self.samples = samples

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        return _TimedReader(self, context.subtask, context.parallelism, offsets)


class _CountingWriter(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, samples: str, subtask: int) -> None:
        super().__init__(inner)
        self.path = os.path.join(samples, f"sink-{subtask}-{os.getpid()}.json")
        self.windows = self.counted = 0
        self.last = 0.0

    def write(self, record: Any) -> None:
        self.windows += 1
        self.counted += record["n"]
        self.last = time.time()
        self.inner.write(record)

    def close(self) -> None:
        self.inner.close()
        with open(self.path, "w") as out:
            json.dump({"windows": self.windows, "counted": self.counted, "last": self.last}, out)


class CountingSink(Sink):
    def __init__(self, url: str, samples: str) -> None:
        self.inner = FileSink(url)
        self.samples = samples

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return _CountingWriter(self.inner.create_writer(context), self.samples, context.subtask)


def build(env: StreamEnvironment) -> None:
    source = TimedGenerator(int(env.args["count"]), int(env.args["keys"]), env.args["samples"])
    watermarks = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"])
    (
        env.source(source, name="clicks", watermarks=watermarks)
        .key_by(lambda r: r["key"])
        .window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .aggregate(
            Count(),
            window_function=lambda key, w, n: {"key": key, "start": w.start, "n": n},
            name="per-minute",
        )
        .sink(CountingSink(env.args["output"], env.args["samples"]), name="out")
    )
