"""Windows on the machinery every keyed function has: a window vertex runs
`WindowProcess`, a keyed process function over the vertex's keyed state and
timers, so window contents and their timers are checkpointed, savepointed and
redistributed by key group like any state.

Per key, `_window.windows` maps each open window (start, end — 16 bytes) to its
accumulator (aggregate and reduce) or to how many elements it holds (process); a
process window's elements are `_window.elements` entries (start, end, n — 24
bytes), one per element, so adding one writes one entry. A window fires at its `max_timestamp` (event time:
when the watermark reaches it; processing time: on the clock) and is cleared at
`max_timestamp + allowed_lateness`. Session windows merge on arrival: a record's
window and every open window it touches (Flink's inclusive intersection) become
their cover, accumulators merged with `merge(a, b)`, elements moved.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from lockgate.runtime.api.functions import Context, KeyedProcessFunction, RuntimeContext
from lockgate.runtime.api.windows import TimeWindow, WindowSpec
from lockgate.runtime.state.descriptors import MapStateDescriptor

WINDOWS = MapStateDescriptor("_window.windows")
ELEMENTS = MapStateDescriptor("_window.elements")


class LateRecords:
    """Records a window vertex dropped because every window they belong to had
    closed; read by the metrics (`lockgate_late_records_dropped_total`)."""

    def __init__(self) -> None:
        self.count = 0


class MissingEventTimeError(ValueError):
    """A record without event time reached event-time windows."""


_BOUNDS = struct.Struct(">qq")
_ELEMENT = struct.Struct(">qqq")


def _bounds(window: TimeWindow) -> bytes:
    """A window as a map key: 16 bytes (one cheap key to serialize, not a tuple)."""
    return _BOUNDS.pack(window.start, window.end)


def _element(window: TimeWindow, n: int) -> bytes:
    return _ELEMENT.pack(window.start, window.end, n)


def window_of_bounds(bounds: bytes) -> TimeWindow:
    """The window a `WINDOWS` map key (its 16 bytes) stands for."""
    return TimeWindow(*_BOUNDS.unpack(bounds))


def element_position(position: bytes) -> tuple[TimeWindow, int]:
    """The window and the place in it of an `ELEMENTS` map key (its 24 bytes)."""
    start, end, n = _ELEMENT.unpack(position)
    return TimeWindow(start, end), n


def _touches(a: TimeWindow, b: TimeWindow) -> bool:
    return a.start <= b.end and b.start <= a.end


_ABSENT = object()
"""What a window's entry reads as when the window is not open: one read tells an
absent window from any accumulator, None included."""


class WindowProcess(KeyedProcessFunction):
    def __init__(self, vertex: str, spec: WindowSpec, late: LateRecords) -> None:
        self._vertex = vertex
        self._spec = spec
        self._assigner = spec.assigner
        self._event_time = spec.assigner.time_domain == "event_time"
        self._lateness = spec.allowed_lateness_ms
        self._late = late

    def open(self, ctx: RuntimeContext) -> None:
        self._windows = ctx.state(WINDOWS)
        self._elements = ctx.state(ELEMENTS) if self._spec.function is not None else None
        if self._spec.function is not None:
            self._spec.function.open(ctx)

    def close(self) -> None:
        if self._spec.function is not None:
            self._spec.function.close()

    # -- records -------------------------------------------------------------------

    def process(self, value: Any, ctx: Context) -> Iterator[Any]:
        timers = ctx.timers
        if self._event_time:
            timestamp = ctx.timestamp
            if timestamp is None:
                raise MissingEventTimeError(
                    f"{self._vertex}: a record without event time reached event-time windows; "
                    "declare watermarks=WatermarkStrategy...with_timestamp_assigner(...) on the source"
                )
        else:
            timestamp = timers.current_processing_time()
        watermark = timers.current_watermark()
        accepted = False
        for assigned in self._assigner.assign(timestamp):
            window = self._merged(assigned) if self._assigner.merging else assigned
            if self._event_time and window.max_timestamp + self._lateness <= watermark:
                continue  # closed: its state is gone, or about to be
            if self._assigner.merging:
                self._merge_into(window, ctx)
            accepted = True
            opened, held = self._add(window, value)
            if self._event_time and window.max_timestamp <= watermark:
                yield from self._emit(window, held, ctx)  # a late record within the lateness: fire again
            elif not opened and not self._assigner.merging:
                continue  # its timers were set when it opened (a merged window's were moved)
            elif self._event_time:
                timers.register_event_time_timer(window.max_timestamp)
            else:
                timers.register_processing_time_timer(window.max_timestamp)
            if self._event_time and self._lateness:
                timers.register_event_time_timer(window.max_timestamp + self._lateness)
        if not accepted:
            self._late.count += 1

    def _open_windows(self) -> list[tuple[TimeWindow, Any]]:
        """The key's open windows with what each holds (accumulator, or element count)."""
        return [(window_of_bounds(bounds), held) for bounds, held in self._windows.items()]

    def _merged(self, window: TimeWindow) -> TimeWindow:
        """The cover of `window` and every open window it touches (nothing changes)."""
        for other, _ in self._open_windows():
            if _touches(window, other):
                window = window.cover(other)
        return window

    def _merge_into(self, target: TimeWindow, ctx: Context) -> None:
        """Move every open window inside `target` into it, with its timers."""
        for window, held in self._open_windows():
            if window == target or not _touches(window, target):
                continue
            self._drop_timers(window, ctx)
            if (aggregate := self._spec.aggregate) is not None:
                current = self._windows.get(_bounds(target), _ABSENT)
                merged = held if current is _ABSENT else aggregate.merge(current, held)
                self._windows.put(_bounds(target), merged)
            else:
                for element in self._take_elements(window, held):
                    self._add(target, element)
            self._windows.remove(_bounds(window))

    def _drop_timers(self, window: TimeWindow, ctx: Context) -> None:
        if self._event_time:
            ctx.timers.delete_event_time_timer(window.max_timestamp)
            if self._lateness:
                ctx.timers.delete_event_time_timer(window.max_timestamp + self._lateness)
        else:
            ctx.timers.delete_processing_time_timer(window.max_timestamp)

    def _add(self, window: TimeWindow, value: Any) -> tuple[bool, Any]:
        """Add `value` to `window`: whether that opened the window, and what the
        window holds now. One read and one write of the window's entry."""
        bounds = _bounds(window)
        if (aggregate := self._spec.aggregate) is not None:
            accumulator = self._windows.get(bounds, _ABSENT)
            opened = accumulator is _ABSENT
            held = aggregate.add(value, aggregate.create_accumulator() if opened else accumulator)
            self._windows.put(bounds, held)
            return opened, held
        assert self._elements is not None
        count = self._windows.get(bounds, 0)
        self._elements.put(_element(window, count), value)
        self._windows.put(bounds, count + 1)
        return count == 0, count + 1

    def _elements_of(self, window: TimeWindow, count: int) -> list[Any]:
        assert self._elements is not None
        return [self._elements.get(_element(window, n)) for n in range(count)]

    def _take_elements(self, window: TimeWindow, count: int) -> list[Any]:
        assert self._elements is not None
        elements = self._elements_of(window, count)
        for n in range(count):
            self._elements.remove(_element(window, n))
        return elements

    # -- firing --------------------------------------------------------------------

    def _emit(self, window: TimeWindow, held: Any, ctx: Context) -> Iterator[Any]:
        spec = self._spec
        if spec.aggregate is not None:
            result = spec.aggregate.get_result(held)
            if spec.window_function is None:
                yield result
            else:
                yield spec.window_function(ctx.current_key, window, result)
            return
        assert spec.function is not None
        produced = spec.function.process(ctx.current_key, window, self._elements_of(window, held), ctx)
        if produced is not None:
            yield from produced

    def on_timer(self, timestamp: int, ctx: Context) -> Iterator[Any]:
        if (ctx.time_domain == "event_time") != self._event_time:
            return
        lateness = self._lateness if self._event_time else 0
        for window, held in self._windows_at(timestamp, lateness):
            if window.max_timestamp == timestamp:
                yield from self._emit(window, held, ctx)
            if window.max_timestamp + lateness == timestamp:
                self._clear(window, held)

    def _windows_at(self, timestamp: int, lateness: int) -> list[tuple[TimeWindow, Any]]:
        """The key's open windows that fire or close at `timestamp`, with what they
        hold: for windows of one size, the two it can be, looked up; session windows
        are scanned."""
        size = self._assigner.fixed_size()
        if size is None:
            return self._open_windows()
        found = []
        for end in sorted({timestamp + 1, timestamp + 1 - lateness}):
            window = TimeWindow(end - size, end)
            if (held := self._windows.get(_bounds(window), _ABSENT)) is not _ABSENT:
                found.append((window, held))
        return found

    def _clear(self, window: TimeWindow, held: Any) -> None:
        if self._elements is not None:
            self._take_elements(window, held)
        self._windows.remove(_bounds(window))
