"""A job module the entrypoint tests import by name, as a user's image would."""

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
        env.source(LogSource("file:///tmp/lockgate-test-lines"), name="lines")
        .flat_map(lambda line: line["text"].split(), name="words")
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink("file:///tmp/lockgate-test-out"), name="out")
    )


NOT_CALLABLE = 42
