"""A streaming word count: `lockgate run examples.wordcount:build --arg input=URL --arg output=URL`.

Reads a directory of `part-*.jsonl` files of {"text": ...} lines, keeps each
word's running count in keyed state, and writes {"word", "count"} records
exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lockgate.runtime import (
    Context,
    FileSink,
    KeyedProcessFunction,
    LogSource,
    RuntimeContext,
    StreamEnvironment,
    ValueStateDescriptor,
)


class CountWords(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Context) -> Iterator[dict[str, Any]]:
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}


def build(env: StreamEnvironment) -> None:
    (
        env.source(LogSource(env.args["input"]), name="lines")
        .flat_map(lambda line: line["text"].lower().split(), name="words")
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink(env.args["output"]), name="out")
    )
