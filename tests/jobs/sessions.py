"""Sessions of out-of-order clicks: the input, its plain-Python reference, and the
session-window job the engine and Spark tests run on it."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from lockgate.runtime import (
    AggregateFunction,
    EventTimeSessionWindows,
    FileSink,
    LogSource,
    ProcessWindowFunction,
    StreamEnvironment,
    TimeWindow,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

GAP = 5_000
DISORDER = 2_000


def write_sessions(directory: Path, users: int, partitions: int, seed: int) -> set[tuple[str, int, int, int]]:
    """Each user's sessions (events < GAP/2 apart, sessions 3 GAPs or more apart),
    its events spread over the partitions; each partition in time order but for a
    jitter below DISORDER. Returns the sessions: (user, start, end, count)."""
    rng = random.Random(seed)
    events: list[list[tuple[int, str]]] = [[] for _ in range(partitions)]
    expected = set()
    for u in range(users):
        user = f"u{u}"
        t = rng.randrange(0, 20_000)
        for _ in range(rng.randint(1, 4)):
            start, count = t, rng.randint(1, 12)
            for n in range(count):
                events[rng.randrange(partitions)].append((t, user))
                if n < count - 1:
                    t += rng.randrange(1, GAP // 2)
            last = t
            expected.add((user, start, last + GAP, count))
            t = last + rng.randrange(3 * GAP, 6 * GAP)
    directory.mkdir(parents=True)
    for index, partition in enumerate(events):
        noisy = sorted(partition, key=lambda e: e[0] + rng.randrange(DISORDER))
        with open(directory / f"part-{index}.jsonl", "w") as f:
            for ts, user in noisy:
                f.write(json.dumps({"user": user, "ts": ts}) + "\n")
    return expected


class Session(ProcessWindowFunction):
    def process(
        self, key: Any, window: TimeWindow, elements: list[Any], ctx: Any
    ) -> Iterator[dict[str, Any]]:
        first = min(e["ts"] for e in elements)
        yield {"user": key, "start": first, "end": window.end, "count": len(elements)}


def _strategy() -> WatermarkStrategy:
    bounded = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=DISORDER))
    return bounded.with_timestamp_assigner(lambda r: r["ts"])


def _held(delay_s: float) -> Any:
    def held(record: Any) -> Any:
        time.sleep(delay_s)  # the slow upstream system this stands for: the job is still running
        return record

    return held


def sessions_job(env: StreamEnvironment) -> None:
    (
        env.source(LogSource(env.args["input"]), name="events", watermarks=_strategy())
        .map(_held(float(env.args.get("delay_s", "0"))), name="held")
        .key_by(lambda r: r["user"])
        .window(EventTimeSessionWindows.with_gap(timedelta(milliseconds=GAP)))
        .process(Session(), name="sessions")
        .sink(FileSink(env.args["output"]), name="out")
    )


class Count(AggregateFunction[Any, int, int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


def counts_job(env: StreamEnvironment) -> None:
    """Clicks per user per 10 s of event time; `idleness_ms` (optional) lets a
    silent partition go; `watermark_interval_ms` (optional) sets how often the
    source sends its watermark."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r: r["ts"])
    if "watermark_interval_ms" in env.args:
        interval = timedelta(milliseconds=int(env.args["watermark_interval_ms"]))
        strategy = strategy.with_watermark_interval(interval)
    if "idleness_ms" in env.args:
        strategy = strategy.with_idleness(timedelta(milliseconds=int(env.args["idleness_ms"])))
    (
        env.source(LogSource(env.args["input"]), name="clicks", watermarks=strategy)
        .key_by(lambda r: r["user"])
        .window(TumblingEventTimeWindows.of(timedelta(seconds=10)))
        .aggregate(
            Count(),
            window_function=lambda user, w, n: {"user": user, "start": w.start, "n": n},
            name="per-10s",
        )
        .sink(FileSink(env.args["output"]), name="out")
    )
