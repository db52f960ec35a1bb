"""User functions. A job's `KeyedProcessFunction` subclasses these.

class CountWords(KeyedProcessFunction):
    def open(self, ctx):                     # ctx: RuntimeContext
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value, ctx):           # ctx: Context
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}

Timers: `ctx.timers.register_processing_time_timer(ms)` (or `..._event_time_timer`)
in `process`; `on_timer(timestamp, ctx)` runs when it fires, with that key current.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol

TimeDomain = Literal["event_time", "processing_time"]


class RuntimeContext(Protocol):
    """What a function sees when it opens: its subtask and its state."""

    @property
    def subtask_index(self) -> int:
        """This subtask's index, 0 to parallelism - 1."""

    @property
    def parallelism(self) -> int:
        """How many subtasks run this function."""

    def state(self, descriptor: Any) -> Any:
        """The keyed state for `descriptor` (a ValueStateDescriptor, ...)."""
        ...


class TimerService(Protocol):
    """A keyed function's timers: per key and timestamp (milliseconds since the
    epoch), kept in the state backend and so in every checkpoint and savepoint.
    Registering a timer that exists does nothing: it fires once."""

    def register_event_time_timer(self, timestamp: int) -> None:
        """Fire `on_timer` once the watermark reaches `timestamp`."""
        ...

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Fire `on_timer` once the runtime's clock reaches `timestamp`."""
        ...

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Delete the current key's event-time timer at `timestamp`, if there is one."""

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Delete the current key's processing-time timer at `timestamp`, if there is one."""

    def current_watermark(self) -> int:
        """The operator's event time: no record at or before it is still to come
        (before the first watermark: the smallest 64-bit integer)."""
        ...

    def current_processing_time(self) -> int:
        """The runtime's clock, in milliseconds since the epoch."""
        ...


class Context(Protocol):
    """What a function sees for each record, and for each timer that fires."""

    @property
    def current_key(self) -> Any:
        """The key of the record being processed, or of the timer firing."""

    @property
    def timestamp(self) -> int | None:
        """The record's event time, or the firing timer's timestamp; None when the
        record has none."""
        ...

    @property
    def timers(self) -> TimerService:
        """The current key's timers."""

    @property
    def time_domain(self) -> TimeDomain | None:
        """In `on_timer`: the domain of the firing timer; None in `process`."""
        ...

    def state(self, descriptor: Any) -> Any:
        """The keyed state for `descriptor`, of the current key."""
        ...


class KeyedProcessFunction:
    """Processes the records of a keyed stream one at a time, with keyed state."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record; declare state here."""

    def process(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one record; yield (or return an iterable of) output records."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement process(value, ctx)")

    def on_timer(self, timestamp: int, ctx: Context) -> Iterable[Any] | None:
        """A timer of the current key fired (`ctx.time_domain` says which kind);
        yield output records as in `process`. The default ignores timers."""
        return None

    def close(self) -> None:
        """Called once when the subtask ends."""
