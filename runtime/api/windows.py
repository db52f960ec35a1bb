"""Windows over a keyed stream, as in Flink: an assigner puts each record into
time windows [start, end) (milliseconds, end exclusive); a window fires when the
watermark (or, for processing-time windows, the clock) passes its last
millisecond, `end - 1`.

    keyed.window(TumblingEventTimeWindows.of(timedelta(minutes=1)))
        .aggregate(CountAgg(), window_function=lambda key, window, n: {...}, name="per-minute")
    keyed.window(EventTimeSessionWindows.with_gap(timedelta(seconds=30)))
        .allowed_lateness(timedelta(seconds=10))
        .process(Sessions(), name="sessions")

A record whose every window has closed (its end - 1 plus the allowed lateness is
at or before the watermark) is dropped and counted
(`lockgate_late_records_dropped_total`); within the allowed lateness a window
that fired fires again with the record added.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Literal, Self

from lockgate.runtime.api.functions import Context, RuntimeContext
from lockgate.runtime.api.validation import JobDefinitionError, milliseconds
from lockgate.runtime.state.descriptors import AggregateFunction


@dataclass(frozen=True, order=True)
class TimeWindow:
    """A window of time, `[start, end)` in milliseconds since the epoch."""

    start: int
    end: int  # exclusive

    @property
    def max_timestamp(self) -> int:
        """The window's last millisecond: it fires when event time reaches it."""
        return self.end - 1

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window holding both this one and `other`."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


TimeDomainName = Literal["event_time", "processing_time"]


class WindowAssigner(ABC):
    time_domain: ClassVar[TimeDomainName] = "event_time"
    merging: ClassVar[bool] = False  # session windows: overlapping windows of a key become one

    @abstractmethod
    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The windows a record at `timestamp` belongs to."""

    def fixed_size(self) -> int | None:
        """The length of every window this assigner makes, if they are all alike
        (then a window is known by its end); None for session windows."""
        return None


def _start(timestamp: int, size: int, offset: int) -> int:
    return timestamp - (timestamp - offset) % size


@dataclass(frozen=True)
class TumblingEventTimeWindows(WindowAssigner):
    """Windows of event time, end to end: made with `of(size)`."""

    size_ms: int
    offset_ms: int = 0

    @classmethod
    def of(cls, size: timedelta, offset: timedelta = timedelta(0)) -> Self:
        """Windows of `size`, end to end, starting at multiples of `size` (shifted by
        `offset`) since the epoch."""
        return cls(
            milliseconds(size, f"{cls.__name__}.of size"),
            milliseconds(offset, f"{cls.__name__}.of offset", positive=False),
        )

    def fixed_size(self) -> int | None:
        """The windows' size in milliseconds."""
        return self.size_ms

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The one window holding `timestamp`."""
        start = _start(timestamp, self.size_ms, self.offset_ms)
        return [TimeWindow(start, start + self.size_ms)]


@dataclass(frozen=True)
class SlidingEventTimeWindows(WindowAssigner):
    """Windows of event time that overlap: made with `of(size, slide)`."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0

    @staticmethod
    def of(size: timedelta, slide: timedelta, offset: timedelta = timedelta(0)) -> SlidingEventTimeWindows:
        """Windows of `size` starting every `slide` (shifted by `offset`): each record is
        in size / slide windows."""
        size_ms = milliseconds(size, "SlidingEventTimeWindows.of size")
        slide_ms = milliseconds(slide, "SlidingEventTimeWindows.of slide")
        if slide_ms > size_ms:
            raise JobDefinitionError(
                f"SlidingEventTimeWindows.of: a slide ({slide}) longer than the size ({size}) "
                "leaves records in no window"
            )
        return SlidingEventTimeWindows(
            size_ms, slide_ms, milliseconds(offset, "SlidingEventTimeWindows.of offset", positive=False)
        )

    def fixed_size(self) -> int | None:
        """The windows' size in milliseconds."""
        return self.size_ms

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """Every window holding `timestamp`."""
        last = _start(timestamp, self.slide_ms, self.offset_ms)
        return [
            TimeWindow(s, s + self.size_ms) for s in range(last, timestamp - self.size_ms, -self.slide_ms)
        ]


@dataclass(frozen=True)
class EventTimeSessionWindows(WindowAssigner):
    """Session windows of event time: made with `with_gap`."""

    gap_ms: int
    merging: ClassVar[bool] = True

    @staticmethod
    def with_gap(gap: timedelta) -> EventTimeSessionWindows:
        """Sessions: a key's records closer than `gap` to one another (or exactly `gap`
        apart) form one window, which ends `gap` after its last record."""
        return EventTimeSessionWindows(milliseconds(gap, "EventTimeSessionWindows.with_gap"))

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The window [timestamp, timestamp + gap), merged with every open session it
        touches."""
        return [TimeWindow(timestamp, timestamp + self.gap_ms)]


@dataclass(frozen=True)
class TumblingProcessingTimeWindows(TumblingEventTimeWindows):
    """Tumbling windows of processing time: a record goes into the window of the
    moment it is processed, which fires on the runtime's clock."""

    time_domain: ClassVar[TimeDomainName] = "processing_time"


class ProcessWindowFunction:
    """Gets every element of a window of a key when the window fires."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any window fires."""

    def process(
        self, key: Any, window: TimeWindow, elements: list[Any], ctx: Context
    ) -> Iterable[Any] | None:
        """Called when a window fires, with its key, the window and every element it holds;
        what it returns or yields is emitted with the window's `max_timestamp` as event
        time."""
        raise NotImplementedError(
            f"{type(self).__qualname__} must implement process(key, window, elements, ctx)"
        )

    def close(self) -> None:
        """Called once when the subtask ends."""


WindowResultFunction = Callable[[Any, TimeWindow, Any], Any]
"""`window_function(key, window, result)`: the record a fired window emits."""


@dataclass(frozen=True)
class WindowSpec:
    """A window vertex, as plain data: how records are windowed and what a fired
    window computes — every element (`function`), or an incremental `aggregate`
    (a `reduce` is an aggregate) with an optional `window_function`."""

    assigner: WindowAssigner
    allowed_lateness_ms: int = 0
    function: ProcessWindowFunction | None = None
    aggregate: AggregateFunction[Any, Any, Any] | None = None
    window_function: WindowResultFunction | None = None


class Reducing(AggregateFunction[Any, Any, Any]):
    """`reduce(fn)` as an aggregate: the accumulator is the running value."""

    _EMPTY = ("lockgate.empty-reduce",)

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def create_accumulator(self) -> Any:
        return self._EMPTY

    def add(self, value: Any, accumulator: Any) -> Any:
        return value if accumulator == self._EMPTY else self.fn(accumulator, value)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        if a == self._EMPTY:
            return b
        return a if b == self._EMPTY else self.fn(a, b)


def check_window_spec(spec: WindowSpec, label: str) -> None:
    """Refuse, before anything runs, what a window vertex could not compute."""
    aggregate = spec.aggregate
    if spec.assigner.merging and aggregate is not None and type(aggregate).merge is AggregateFunction.merge:
        raise JobDefinitionError(
            f"window {label!r}: session windows merge, so {type(aggregate).__qualname__} must implement "
            "merge(a, b) to combine two accumulators"
        )
    if spec.window_function is not None and not callable(spec.window_function):
        raise JobDefinitionError(
            f"window {label!r}: window_function must be a function (key, window, result)"
        )
    if spec.assigner.time_domain == "processing_time" and spec.allowed_lateness_ms:
        raise JobDefinitionError(
            f"window {label!r}: processing-time windows have no late records; drop allowed_lateness"
        )
