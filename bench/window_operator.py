"""The window operator alone, in-process: clicks pushed into a tumbling one-minute
count per key on RocksDB (one key-group half of a P = 2 job), then the final
watermark. Separates the cost of taking records in from the cost of firing.

    .venv/bin/python bench/window_operator.py [--count N] [--keys K]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import timedelta
from typing import Any

from lockgate.runtime import TumblingEventTimeWindows
from lockgate.runtime.api.windows import WindowSpec
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.engine.events import Barrier, EventTime, KeyedRecord, keyed_record
from lockgate.runtime.engine.operators import ProcessOperator
from lockgate.runtime.engine.window_operator import LateRecords, WindowProcess
from window_job import Count

M = 128


class Counted:
    def __init__(self) -> None:
        self.records = 0

    def push(self, records: list[Any], timestamps: list[int | None] | None = None) -> None:
        self.records += len(records)

    def barrier(self, barrier: Barrier) -> None:
        pass

    def event_time(self, mark: EventTime) -> None:
        pass

    def end(self) -> None:
        pass

    def flush(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as local:
        backend = RocksDBKeyedStateBackend(M, range(M // 2), local)
        spec = WindowSpec(
            TumblingEventTimeWindows.of(timedelta(minutes=1)),
            aggregate=Count(),
            window_function=lambda key, w, n: {"key": key, "start": w.start, "n": n},
        )
        out = Counted()
        window = WindowProcess("per-minute", spec, LateRecords())
        operator = ProcessOperator(
            "per-minute", window, backend=backend, context=(0, 1), out=out, snapshot=lambda *_: None
        )
        clicks: list[tuple[KeyedRecord, int]] = []
        n = 0
        while len(clicks) < args.count:  # the clicks of this subtask's key groups, one per ms
            key = (n * 2_654_435_761) % 4_294_967_296 % args.keys
            if (record := keyed_record(key, {"key": key, "ts": n}, M))[2] < M // 2:
                clicks.append((record, n))
            n += 1
        batches = [clicks[i : i + 512] for i in range(0, len(clicks), 512)]
        started = time.perf_counter()
        for batch in batches:
            operator.push([r for r, _ in batch], [ts for _, ts in batch])
        pushed = time.perf_counter()
        operator.advance_watermark(2**62)
        fired = time.perf_counter()
        backend.close()
    print(
        f"in: {args.count / (pushed - started):,.0f} clicks/s; fired {out.records:,} windows in "
        f"{fired - pushed:.2f} s ({out.records / (fired - pushed):,.0f}/s); "
        f"overall {args.count / (fired - started):,.0f} clicks/s"
    )


if __name__ == "__main__":
    main()
