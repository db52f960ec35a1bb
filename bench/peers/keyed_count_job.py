"""The keyed running count as a Lockgate job, written as a user would write it:
JSON lines in (`LogSource`), per key a (count, sum) in RocksDB, one record out per
record in (`FileSink`). The only addition is timing: each subtask notes when it
processed its first record and when its operator closed (after the last one),
in the directory `--arg samples=` names.

    lockgate run keyed_count_job:build --bounded --arg input=URL --arg output=URL --arg samples=DIR
"""

from __future__ import annotations

import json
import os
import time
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


class CountAndSum(KeyedProcessFunction):
    def __init__(self, samples: str) -> None:
        self.samples = samples

    def open(self, ctx: RuntimeContext) -> None:
        self.count_sum = ctx.state(ValueStateDescriptor("count_sum", default=(0, 0)))
        self.first: float | None = None
        self.subtask = ctx.subtask_index

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        if self.first is None:
            self.first = time.time()
        count, total = self.count_sum.value()
        count, total = count + 1, total + value["v"]
        self.count_sum.update((count, total))
        yield {"k": value["k"], "n": value["n"], "count": count, "sum": total}

    def close(self) -> None:
        if self.first is not None:
            path = os.path.join(self.samples, f"subtask-{self.subtask}-{os.getpid()}.json")
            with open(path, "w") as out:
                json.dump({"first": self.first, "last": time.time()}, out)


def build(env: StreamEnvironment) -> None:
    (
        env.source(LogSource(env.args["input"]), name="records")
        .key_by(lambda record: record["k"])
        .process(CountAndSum(env.args["samples"]), name="count")
        .sink(FileSink(env.args["output"]), name="out")
    )
