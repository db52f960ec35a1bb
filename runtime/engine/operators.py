"""Chained operators: records pass from one to the next by plain calls, in batches.

Every operator takes `push(records, timestamps)`, `barrier(barrier)`,
`event_time(mark)` and `end()` and hands its results to its output — the next
operator, a fan-out, or an exchange that partitions by key group into channels
to other subtasks. `timestamps` is None when the records carry no event time
(the job declared no watermarks), else one per record; a record keeps its
timestamp through map, filter and flat_map, and what a process function yields
takes the timestamp of the record (or event-time timer) it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lockgate.runtime.api.connectors import SinkWriter
from lockgate.runtime.api.functions import KeyedProcessFunction, TimeDomain
from lockgate.runtime.engine.channels import OutputChannel
from lockgate.runtime.engine.events import (
    Barrier,
    EndOfStream,
    EventTime,
    KeyedRecord,
    TimestampedBatch,
    Watermark,
)
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S, FrameSizer
from lockgate.runtime.engine.timer_service import OperatorTimers
from lockgate.runtime.key_serializer import deserialize_key, serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.state.backend import KeyedStateBackend

SnapshotHook = Callable[[str, Barrier], None]
Timestamps = list[int | None] | None


class Output(Protocol):
    def push(self, records: list[Any], timestamps: Timestamps = None) -> None: ...

    def barrier(self, barrier: Barrier) -> None: ...

    def event_time(self, mark: EventTime) -> None:
        """A watermark, or idleness, from upstream: forwarded after whatever it fires."""
        ...

    def end(self) -> None: ...

    def flush(self) -> None: ...


class FanOut:
    def __init__(self, outputs: Sequence[Output]) -> None:
        self._outputs = list(outputs)

    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        for output in self._outputs:
            output.push(records, timestamps)

    def barrier(self, barrier: Barrier) -> None:
        for output in self._outputs:
            output.barrier(barrier)

    def event_time(self, mark: EventTime) -> None:
        for output in self._outputs:
            output.event_time(mark)

    def end(self) -> None:
        for output in self._outputs:
            output.end()

    def flush(self) -> None:
        for output in self._outputs:
            output.flush()


class _Forwarding:
    """Barriers, event time, end and flush go straight through (stateless operators)."""

    out: Output

    def barrier(self, barrier: Barrier) -> None:
        self.out.barrier(barrier)

    def event_time(self, mark: EventTime) -> None:
        self.out.event_time(mark)

    def end(self) -> None:
        self.out.end()

    def flush(self) -> None:
        self.out.flush()


class Counted(_Forwarding):
    """Counts the records pushed through it (a vertex's records in or out) once they
    went through: records in per busy second (the autoscaler's true rate) must not
    run ahead of the busy time that processing them takes — a batch from the
    exchange can be seconds of a costly operator's work. Read by the metrics on
    another thread, written by one chain thread only."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.count = 0

    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        self.out.push(records, timestamps)
        self.count += len(records)


class KeyGroupCounted(Counted):
    """A `Counted` for an operator that takes `KeyedRecord`s: it also counts the
    records of each key group in the subtask's range (`first` on), which the
    autoscaler needs to size for key skew — the busiest subtask, not the mean one,
    bounds what a keyed chain takes in."""

    def __init__(self, out: Output, key_groups: range) -> None:
        super().__init__(out)
        self.first = key_groups.start
        self.key_group_records = [0] * len(key_groups)

    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        self.out.push(records, timestamps)
        self.count += len(records)
        counts, first = self.key_group_records, self.first
        for record in records:
            counts[record[2] - first] += 1


class _Function(_Forwarding):
    """A stateless operator of the job's function `fn` (map, flat_map, filter)."""

    def __init__(self, fn: Callable[[Any], Any], out: Output) -> None:
        self._fn = fn
        self.out = out


class MapOperator(_Function):
    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        fn = self._fn
        self.out.push([fn(r) for r in records], timestamps)


class FlatMapOperator(_Function):
    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        fn = self._fn
        if timestamps is None:
            self.out.push([item for r in records for item in fn(r)])
            return
        items: list[Any] = []
        stamps: list[int | None] = []
        for record, timestamp in zip(records, timestamps, strict=True):
            produced = list(fn(record))
            items.extend(produced)
            stamps.extend([timestamp] * len(produced))
        self.out.push(items, stamps)


class FilterOperator(_Function):
    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        fn = self._fn
        if timestamps is None:
            self.out.push([r for r in records if fn(r)])
            return
        kept = [(r, t) for r, t in zip(records, timestamps, strict=True) if fn(r)]
        self.out.push([r for r, _ in kept], [t for _, t in kept])


class _KeyContext:
    """The `ctx` a process function sees; `current_key` reads the backend's, and
    `timestamp` and `time_domain` are set by the operator for each call."""

    def __init__(
        self, backend: KeyedStateBackend, subtask: int, parallelism: int, timers: OperatorTimers
    ) -> None:
        self._backend = backend
        self.subtask_index = subtask
        self.parallelism = parallelism
        self.timers = timers
        self.timestamp: int | None = None
        self.time_domain: TimeDomain | None = None

    @property
    def current_key(self) -> Any:
        return self._backend.current.key

    def state(self, descriptor: Any) -> Any:
        return self._backend.state(descriptor)


class ProcessOperator:
    """A keyed process function; its input records arrive as `KeyedRecord`s.
    Processing-time timers fire after each batch and whenever the chain is idle
    (`flush`); event-time timers when the watermark passes them."""

    def __init__(
        self,
        name: str,
        function: KeyedProcessFunction,
        *,
        backend: KeyedStateBackend,
        context: tuple[int, int],
        out: Output,
        snapshot: SnapshotHook,
    ) -> None:
        self.name = name
        self._function = function
        self._backend = backend
        self.timers = OperatorTimers(name, backend)
        self._ctx = _KeyContext(backend, *context, self.timers)
        self.out = out
        self._snapshot = snapshot
        function.open(self._ctx)

    def push(self, records: list[KeyedRecord], timestamps: Timestamps = None) -> None:
        backend = self._backend
        owned = backend.key_groups
        set_key = backend.current.set
        process = self._function.process
        ctx = self._ctx
        results: list[Any] = []
        stamps: list[int | None] | None = None
        if timestamps is None:
            for key, key_bytes, group, value in records:
                if group not in owned:
                    raise backend.ownership_error(key, group)
                set_key(key, key_bytes, group)
                if (produced := process(value, ctx)) is not None:
                    results.extend(produced)
        else:
            stamps = []
            try:
                for (key, key_bytes, group, value), timestamp in zip(records, timestamps, strict=True):
                    if group not in owned:
                        raise backend.ownership_error(key, group)
                    set_key(key, key_bytes, group)
                    ctx.timestamp = timestamp
                    if (produced := process(value, ctx)) is not None:
                        before = len(results)
                        results.extend(produced)
                        stamps.extend([timestamp] * (len(results) - before))
            finally:
                ctx.timestamp = None
        if results:
            self.out.push(results, stamps)
        self._emit_processing_time()

    def _fire(
        self, due: list[tuple[int, int, bytes]], domain: TimeDomain, stamps: list[int | None] | None = None
    ) -> list[Any]:
        """What the due timers yield; with `stamps`, each result's timer timestamp
        is appended to it."""
        current = self._backend.current
        on_timer = self._function.on_timer
        ctx = self._ctx
        ctx.time_domain = domain
        results: list[Any] = []
        try:
            for timestamp, key_group, key_bytes in due:
                current.set(deserialize_key(key_bytes), key_bytes, key_group)
                ctx.timestamp = timestamp
                if (produced := on_timer(timestamp, ctx)) is not None:
                    before = len(results)
                    results.extend(produced)
                    if stamps is not None:
                        stamps.extend([timestamp] * (len(results) - before))
        finally:
            ctx.timestamp = ctx.time_domain = None
        return results

    def _emit_processing_time(self) -> None:
        """One batch of the processing-time timers due now: a timer its own firing
        sets for now again fires at the next chance, not in a loop here. What they
        yield carries no event time (as in Flink)."""
        due = self.timers.due("processing_time", self.timers.current_processing_time())
        if due and (results := self._fire(due, "processing_time")):
            self.out.push(results)

    def advance_watermark(self, watermark: int) -> None:
        """Event time reached `watermark`: fire every event-time timer at or before it;
        what a timer yields carries the timer's timestamp."""
        if watermark <= self.timers.watermark:
            return
        self.timers.watermark = watermark
        while due := self.timers.due("event_time", watermark):
            stamps: list[int | None] = []
            if results := self._fire(due, "event_time", stamps):
                self.out.push(results, stamps)

    def event_time(self, mark: EventTime) -> None:
        if isinstance(mark, Watermark):
            self.advance_watermark(mark.timestamp)
        self.out.event_time(mark)

    def barrier(self, barrier: Barrier) -> None:
        self._snapshot(self.name, barrier)
        self.out.barrier(barrier)

    def end(self) -> None:
        self._function.close()
        self.out.end()

    def flush(self) -> None:
        self._emit_processing_time()
        self.out.flush()


class SinkOperator:
    """Writes into the sink's open transaction; pre-commits it at each barrier."""

    def __init__(self, name: str, writer: SinkWriter, snapshot: SnapshotHook) -> None:
        self.name = name
        self.writer = writer
        self._snapshot = snapshot
        self.written = 0
        self._written_at_barrier = 0

    def take_epoch(self) -> int:
        """Records written since the last barrier (at a barrier: those its checkpoint commits)."""
        epoch, self._written_at_barrier = self.written - self._written_at_barrier, self.written
        return epoch

    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        if records:  # a filter or flat_map before it may pass on none
            self.writer.write_batch(records)
            self.written += len(records)

    def barrier(self, barrier: Barrier) -> None:
        self._snapshot(self.name, barrier)

    def event_time(self, mark: EventTime) -> None:
        pass

    def end(self) -> None:
        pass

    def flush(self) -> None:
        pass


class KeyedExchange:
    """Partitions records by key group over the channels to the downstream subtasks,
    each as a `KeyedRecord` if `keyed_records` (for an operator that enters keys),
    else as it is; watermarks and idleness go to every channel."""

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        channels: Sequence[OutputChannel],
        max_parallelism: int,
        batch_size: int = 512,
        in_flight_target_s: float | None = DEFAULT_IN_FLIGHT_TARGET_S,
        *,
        keyed_records: bool = True,
        overtaking: bool = False,
    ) -> None:
        self._key_fn = key_fn
        self._keyed_records = keyed_records
        self._overtaking = overtaking  # barriers overtake what the channels hold
        self._channels = list(channels)
        self._max_parallelism = max_parallelism
        self._buffers: list[list[Any]] = [[] for _ in self._channels]
        # Per channel, the buffered records' timestamps; None while none has one.
        self._stamps: list[list[int | None] | None] = [None for _ in self._channels]
        # Per channel, records per frame (frame_sizing), read for every record.
        self._sizers = [FrameSizer(c, batch_size, in_flight_target_s) for c in self._channels]
        self._frame_sizes = [batch_size for _ in self._channels]

    def push(self, records: list[Any], timestamps: Timestamps = None) -> None:
        key_fn = self._key_fn
        buffers = self._buffers
        sizes = self._frame_sizes
        m = self._max_parallelism
        p = len(self._channels)
        keyed_records = self._keyed_records
        for index, record in enumerate(records):
            key = key_fn(record)
            key_bytes = serialize_key(key)
            group = key_group_of_bytes(key_bytes, m)
            target = group * p // m
            buffer = buffers[target]
            buffer.append((key, key_bytes, group, record) if keyed_records else record)
            stamps = self._stamps[target]
            if timestamps is not None and stamps is None:
                stamps = self._stamps[target] = [None] * (len(buffer) - 1)
            if stamps is not None:
                stamps.append(None if timestamps is None else timestamps[index])
            if len(buffer) >= sizes[target]:
                self._send(target)
        for target, sizer in enumerate(self._sizers):
            if buffers[target] and sizer.overdue():
                self._send(target)

    def _send(self, target: int) -> None:
        if batch := self._buffers[target]:
            stamps = self._stamps[target]
            self._buffers[target] = []
            self._stamps[target] = None
            self._channels[target].send(batch if stamps is None else TimestampedBatch(batch, stamps))
            sizer = self._sizers[target]
            sizer.sent(len(batch))
            self._frame_sizes[target] = sizer.size

    def flush(self) -> None:
        for target in range(len(self._channels)):
            self._send(target)

    def barrier(self, barrier: Barrier) -> None:
        if not self._overtaking:
            self.flush()
            for channel in self._channels:
                channel.send(barrier)
            return
        # Nothing waits for room: each channel's partial frame goes with its barrier,
        # beyond the credit, and the barrier goes ahead of what the channel holds.
        for target, channel in enumerate(self._channels):
            batch, stamps = self._buffers[target], self._stamps[target]
            self._buffers[target], self._stamps[target] = [], None
            carried = (batch if stamps is None else TimestampedBatch(batch, stamps)) if batch else None
            channel.send_overtaking(barrier, carried)
            if batch:
                sizer = self._sizers[target]
                sizer.sent(len(batch))  # a frame went: the next is timed from now, not overdue
                self._frame_sizes[target] = sizer.size

    def event_time(self, mark: EventTime) -> None:
        self.flush()  # the records before it go first
        for channel in self._channels:
            channel.send(mark)

    def end(self) -> None:
        self.flush()
        for channel in self._channels:
            channel.send(EndOfStream())
