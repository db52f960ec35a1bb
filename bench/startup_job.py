"""The job the start-up benchmark runs: a small keyed running sum whose first
record, in whichever task reads it first, writes the wall-clock time it was seen."""

from __future__ import annotations

import os
import time
from typing import Any

from lockgate.runtime import FileSink, GeneratorSource, StreamEnvironment


class MarkFirst:
    """Writes `time.time()` to `path` on the first record any task sees (O_EXCL:
    the first writer wins, the others find the file there)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._marked = False

    def __call__(self, record: Any) -> Any:
        if not self._marked:
            self._marked = True
            seen = time.time()
            try:
                descriptor = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return record
            with os.fdopen(descriptor, "w") as file:
                file.write(repr(seen))
        return record


def build(env: StreamEnvironment) -> None:
    source = GeneratorSource(int(env.args.get("count", "1000")), keys=10, partitions=2)
    (
        env.source(source, name="numbers")
        .map(MarkFirst(env.args["first"]), name="mark")
        .sink(FileSink(env.args["output"]), name="out")
    )
