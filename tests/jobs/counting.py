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
    """A map that raises once, at record `at`, while `flag` does not exist yet."""

    def __init__(self, at: int, flag: str) -> None:
        self.at = at
        self.flag = flag

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        if record["n"] == self.at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            raise RuntimeError(f"injected failure at record {self.at}")
        return record


def failing_running_sum(env: StreamEnvironment, source: Source, out: str, fail: FailOnce) -> None:
    (
        env.source(source, name="numbers")
        .map(fail, name="chaos")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="sum")
        .sink(FileSink(out), name="out")
    )
