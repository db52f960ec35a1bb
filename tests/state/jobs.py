"""A job that keeps every kind of keyed state, timers and windows, and the state it
must hold after given records (computed here in plain Python), for the tests of
`lockgate.state`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from lockgate.runtime import (
    AggregateFunction,
    AggregatingStateDescriptor,
    Context,
    FileSink,
    GeneratorSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ProcessWindowFunction,
    ReducingStateDescriptor,
    RuntimeContext,
    StreamEnvironment,
    TimeWindow,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)

WINDOW_MS = 1_000_000  # no window fires, no event-time timer is due, before the stop
TIMER_AHEAD_MS = 5_000_000


class SumAndCount(AggregateFunction[int, tuple[int, int], float]):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


class SumAndCountOfN(SumAndCount):
    """Of the records' n."""

    def add(self, value: Any, accumulator: tuple[int, int]) -> tuple[int, int]:
        return super().add(value["n"], accumulator)


class EveryKind(KeyedProcessFunction):
    """Per key: how many records (value), their n (list), how many of each parity
    (map), their sum (reducing), their mean (aggregating), the last n in state with a
    TTL, and an event-time and a processing-time timer per record."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.state(ValueStateDescriptor("count", default=0))
        self.seen = ctx.state(ListStateDescriptor("seen"))
        self.parities = ctx.state(MapStateDescriptor("parities"))
        self.total = ctx.state(ReducingStateDescriptor("total", reduce_fn=lambda a, b: a + b))
        self.mean = ctx.state(AggregatingStateDescriptor("mean", agg_fn=SumAndCount()))
        self.last = ctx.state(ValueStateDescriptor("last", ttl=timedelta(days=365)))

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        n = value["n"]
        self.count.update(self.count.value() + 1)
        self.seen.add(n)
        parity = "even" if n % 2 == 0 else "odd"
        self.parities.put(parity, self.parities.get(parity, 0) + 1)
        self.total.add(n)
        self.mean.add(n)
        self.last.update(n)
        ctx.timers.register_event_time_timer(value["ts"] + TIMER_AHEAD_MS)
        ctx.timers.register_processing_time_timer(value["ts"] + TIMER_AHEAD_MS)
        yield (ctx.current_key, self.count.value(), self.total.get())

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[Any]:
        yield ("timer", ctx.current_key, timestamp)


class Elements(ProcessWindowFunction):
    def process(self, key: Any, window: TimeWindow, elements: list[Any], ctx: Any) -> Iterator[Any]:
        yield (key, window.start, [e["n"] for e in elements])


def every_kind(env: StreamEnvironment) -> None:
    watermarks = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_assigner(
        lambda record: record["ts"]
    )
    numbers = env.source(GeneratorSource(0), name="numbers", watermarks=watermarks)
    keyed = numbers.key_by(lambda record: record["key"])
    keyed.process(EveryKind(), name="kinds").sink(FileSink("file:///not/written"), name="out")
    windows = keyed.window(TumblingEventTimeWindows.of(timedelta(milliseconds=WINDOW_MS)))
    windows.aggregate(SumAndCountOfN(), name="means").sink(FileSink("file:///not/written"), name="mean-out")
    windows.process(Elements(), name="elements").sink(FileSink("file:///not/written"), name="elements-out")


def records(count: int, keys: int = 7, *, int_keys: bool = True) -> list[dict[str, Any]]:
    """Records of `keys` keys (strings, and ints unless not `int_keys`), in time order."""
    return [
        {"key": f"k{i % keys}" if i % 3 or not int_keys else i % keys, "n": i, "ts": 1_000 * i}
        for i in range(count)
    ]


def expected_rows(read: list[dict[str, Any]]) -> dict[str, set[tuple[Any, ...]]]:
    """What the reader must return after `read`, as sets of row tuples, by state."""
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for record in read:
        by_key.setdefault(record["key"], []).append(record)
    rows: dict[str, set[tuple[Any, ...]]] = {
        name: set() for name in ("count", "seen", "parities", "total", "mean", "last", "event", "processing")
    }
    windows: set[tuple[Any, ...]] = set()
    elements: set[tuple[Any, ...]] = set()
    for key, mine in by_key.items():
        ns = [r["n"] for r in mine]
        rows["count"].add((key, len(ns)))
        rows["seen"] |= {(key, index, n) for index, n in enumerate(ns)}
        for parity, remainder in (("even", 0), ("odd", 1)):
            if matching := [n for n in ns if n % 2 == remainder]:
                rows["parities"].add((key, parity, len(matching)))
        rows["total"].add((key, sum(ns)))
        rows["mean"].add((key, (sum(ns), len(ns))))
        rows["last"].add((key, ns[-1]))
        rows["event"] |= {(key, r["ts"] + TIMER_AHEAD_MS, "event_time") for r in mine}
        rows["processing"] |= {(key, r["ts"] + TIMER_AHEAD_MS, "processing_time") for r in mine}
        by_window: dict[int, list[int]] = {}
        for r in mine:
            by_window.setdefault(r["ts"] - r["ts"] % WINDOW_MS, []).append(r["n"])
        for start, in_window in by_window.items():
            windows.add((key, start, start + WINDOW_MS, (sum(in_window), len(in_window))))
            elements.add((key, start, start + WINDOW_MS, tuple(in_window)))
    return rows | {"windows": windows, "elements": elements}


def every_kind_generated(env: StreamEnvironment) -> None:
    """`every_kind` on `records(count)` generated in one partition (a run to its end)."""
    count = int(env.args["count"])
    watermarks = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(0)).with_timestamp_assigner(
        lambda record: record["ts"]
    )
    source = GeneratorSource(count, partitions=1, record_fn=lambda n: records(n + 1)[n])
    keyed = env.source(source, name="numbers", watermarks=watermarks).key_by(lambda record: record["key"])
    keyed.process(EveryKind(), name="kinds").sink(FileSink(env.args["output"]), name="out")
