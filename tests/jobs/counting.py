"""Jobs the engine tests run: a word count and a keyed running sum."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

from lockgate.runtime import (
    FileSink,
    ForwardingSinkWriter,
    GeneratorSource,
    JobIdentity,
    Sink,
    SinkWriter,
    Source,
    SourceReader,
    StreamEnvironment,
    SubtaskContext,
)

from tests.jobs.functions import CountWords, RunningSum


def unthrottled_numbers(env: StreamEnvironment) -> GeneratorSource:
    """`count` records over `keys` keys (default 37) from `partitions` partitions (default
    4), read as fast as the job takes them (or at most `rate` per second, if given):
    behind a slow stage, its input stays full."""
    return GeneratorSource(
        int(env.args["count"]),
        keys=int(env.args.get("keys", "37")),
        partitions=int(env.args.get("partitions", "4")),
        rate=float(env.args["rate"]) if "rate" in env.args else None,
    )


def word_count(env: StreamEnvironment, source: Source, out: str) -> None:
    (
        env.source(source, name="lines")
        .flat_map(lambda line: line["text"].split(), name="words")
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink(out), name="out")
    )


def running_sum(env: StreamEnvironment, source: Source, out: str, source_name: str = "numbers") -> None:
    (
        env.source(source, name=source_name)
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(out), name="out")
    )


class FailOnce:
    """A map that raises once: at the first record numbered `at` or later that it sees
    after the sink committed the output of `checkpoints` checkpoints (so they
    completed before the failure, however slow the machine), while `flag` does not
    exist yet."""

    def __init__(self, at: int, flag: str, committed_dir: str, checkpoints: int = 1) -> None:
        self.at = at
        self.flag = flag
        self.committed_dir = committed_dir
        self.checkpoints = checkpoints

    def _has_committed_output(self) -> bool:
        if not os.path.isdir(self.committed_dir):
            return False
        committed = {
            name.rpartition("-chk")[2]
            for name in os.listdir(self.committed_dir)
            if not name.startswith((".", "_"))
        }
        return len(committed) >= self.checkpoints

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        if record["n"] < self.at or os.path.exists(self.flag) or not self._has_committed_output():
            return record
        try:
            # O_EXCL: of several subtasks racing here, exactly one fails.
            os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return record
        raise RuntimeError(f"injected failure at record {record['n']}")


def failing_running_sum(env: StreamEnvironment, source: Source, out: str, fail: FailOnce) -> None:
    (
        env.source(source, name="numbers")
        .map(fail, name="chaos")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(out), name="out")
    )


class InFlight:
    """Records emitted by the sources but not yet written by the sink, at its peak.
    In-process runs only: the counters live in this process."""

    registry: ClassVar[dict[str, InFlight]] = {}

    def __init__(self, name: str) -> None:
        self.name = name
        self.emitted = 0
        self.written = 0
        self.peak = 0
        self._lock = threading.Lock()
        InFlight.registry[name] = self

    def on_emitted(self) -> None:
        with self._lock:
            self.emitted += 1
            self.peak = max(self.peak, self.emitted - self.written)

    def on_written(self) -> None:
        with self._lock:
            self.written += 1


class CountEmitted:
    def __init__(self, tracker: str) -> None:
        self.tracker = tracker

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        InFlight.registry[self.tracker].on_emitted()
        return record


class _SlowWriter(ForwardingSinkWriter):
    def __init__(self, inner: SinkWriter, tracker: str, delay_s: float) -> None:
        super().__init__(inner)
        self.tracker = tracker
        self.delay_s = delay_s

    def write(self, record: Any) -> None:
        time.sleep(self.delay_s)  # the slow external system this sink stands for
        self.inner.write(record)
        InFlight.registry[self.tracker].on_written()


class SlowSink(Sink):
    """A FileSink behind a slow write."""

    def __init__(self, url: str, tracker: str, delay_s: float) -> None:
        self.inner = FileSink(url)
        self.tracker = tracker
        self.delay_s = delay_s

    def validate(self, job: JobIdentity) -> None:
        self.inner.validate(job)

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        return _SlowWriter(self.inner.create_writer(context), self.tracker, self.delay_s)


def slow_sink_sum(env: StreamEnvironment, source: Source, sink: SlowSink) -> None:
    (
        env.source(source, name="numbers")
        .map(CountEmitted(sink.tracker), name="emitted")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(sink, name="out")
    )


class _OffsetsCommittingReader(SourceReader):
    """A reader that, as KafkaSource does, pre-commits its offsets at every
    checkpoint, to hand them on when the checkpoint completes."""

    def __init__(self, inner: SourceReader) -> None:
        self.inner = inner
        self.committed: list[Any] = []

    def poll(self, max_records: int) -> list[Any]:
        return self.inner.poll(max_records)

    def offsets(self) -> dict[str, Any]:
        return self.inner.offsets()

    def reached_end(self) -> bool:
        return self.inner.reached_end()

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return [{"checkpoint": checkpoint_id, "offsets": self.inner.offsets()}]

    def commit(self, committables: list[Any]) -> None:
        self.committed.extend(committables)


class OffsetsCommittingSource(Source):
    def __init__(self, inner: Source) -> None:
        self.inner = inner

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        return _OffsetsCommittingReader(self.inner.open_reader(context, offsets))
