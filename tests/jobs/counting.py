"""Jobs the engine tests run: a word count and a keyed running sum."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    KeyedProcessFunction,
    RuntimeContext,
    Source,
    StreamEnvironment,
    ValueStateDescriptor,
)


class RunningCount(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}


class RunningSum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.state(ValueStateDescriptor("total", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        total = self.total.value() + value["n"]
        self.total.update(total)
        yield {"key": ctx.current_key, "n": value["n"], "sum": total}


def word_count(env: StreamEnvironment, source: Source, out: str) -> None:
    (
        env.source(source, name="lines")
        .flat_map(lambda line: line["text"].split(), name="words")
        .key_by(lambda word: word)
        .process(RunningCount(), name="count")
        .sink(FileSink(out), name="out")
    )


def running_sum(env: StreamEnvironment, source: Source, out: str) -> None:
    (
        env.source(source, name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(out), name="out")
    )


class FailOnce:
    """A map that raises once: at the first record numbered `at` or later that it sees
    after the sink committed some output (so a checkpoint completed before the
    failure, however slow the machine), while `flag` does not exist yet."""

    def __init__(self, at: int, flag: str, committed_dir: str) -> None:
        self.at = at
        self.flag = flag
        self.committed_dir = committed_dir

    def _has_committed_output(self) -> bool:
        return os.path.isdir(self.committed_dir) and any(
            not name.startswith((".", "_")) for name in os.listdir(self.committed_dir)
        )

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
