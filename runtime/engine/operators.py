"""Chained operators: records pass from one to the next by plain calls, in batches.

Every operator takes `push(records)`, `barrier(barrier)` and `end()` and hands
its results to its output — the next operator, a fan-out, or an exchange that
partitions by key group into channels to other subtasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lockgate.runtime.api.connectors import SinkWriter
from lockgate.runtime.api.functions import KeyedProcessFunction, TimeDomain
from lockgate.runtime.engine.channels import OutputChannel
from lockgate.runtime.engine.events import Barrier, EndOfStream
from lockgate.runtime.engine.timer_service import OperatorTimers
from lockgate.runtime.key_serializer import deserialize_key, serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.state.backend import KeyedStateBackend

SnapshotHook = Callable[[str, Barrier], None]


class Output(Protocol):
    def push(self, records: list[Any]) -> None: ...

    def barrier(self, barrier: Barrier) -> None: ...

    def end(self) -> None: ...

    def flush(self) -> None: ...


class FanOut:
    def __init__(self, outputs: Sequence[Output]) -> None:
        self._outputs = list(outputs)

    def push(self, records: list[Any]) -> None:
        for output in self._outputs:
            output.push(records)

    def barrier(self, barrier: Barrier) -> None:
        for output in self._outputs:
            output.barrier(barrier)

    def end(self) -> None:
        for output in self._outputs:
            output.end()

    def flush(self) -> None:
        for output in self._outputs:
            output.flush()


class _Forwarding:
    """Barriers, end and flush go straight through (stateless operators)."""

    out: Output

    def barrier(self, barrier: Barrier) -> None:
        self.out.barrier(barrier)

    def end(self) -> None:
        self.out.end()

    def flush(self) -> None:
        self.out.flush()


class Counted(_Forwarding):
    """Counts the records pushed through it (a vertex's records in or out); read by
    the metrics on another thread, written by one chain thread only."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.count = 0

    def push(self, records: list[Any]) -> None:
        self.count += len(records)
        self.out.push(records)


class MapOperator(_Forwarding):
    def __init__(self, fn: Callable[[Any], Any], out: Output) -> None:
        self._fn = fn
        self.out = out

    def push(self, records: list[Any]) -> None:
        fn = self._fn
        self.out.push([fn(r) for r in records])


class FlatMapOperator(_Forwarding):
    def __init__(self, fn: Callable[[Any], Any], out: Output) -> None:
        self._fn = fn
        self.out = out

    def push(self, records: list[Any]) -> None:
        fn = self._fn
        self.out.push([item for r in records for item in fn(r)])


class FilterOperator(_Forwarding):
    def __init__(self, fn: Callable[[Any], Any], out: Output) -> None:
        self._fn = fn
        self.out = out

    def push(self, records: list[Any]) -> None:
        fn = self._fn
        self.out.push([r for r in records if fn(r)])


class _KeyContext:
    """The `ctx` a process function sees; `current_key` reads the backend's, and
    `timestamp` and `time_domain` are set by the operator for each call."""

    def __init__(
        self, backend: KeyedStateBackend, subtask: int, parallelism: int, timers: OperatorTimers
    ) -> None:
        self._backend = backend
        self._subtask = subtask
        self._parallelism = parallelism
        self.timers = timers
        self.timestamp: int | None = None
        self.time_domain: TimeDomain | None = None

    @property
    def current_key(self) -> Any:
        return self._backend.current.key

    @property
    def subtask_index(self) -> int:
        return self._subtask

    @property
    def parallelism(self) -> int:
        return self._parallelism

    def state(self, descriptor: Any) -> Any:
        return self._backend.state(descriptor)


class ProcessOperator:
    """A keyed process function; its input records arrive as (key, value) pairs.
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

    def push(self, records: list[Any]) -> None:
        set_key = self._backend.set_current_key
        process = self._function.process
        ctx = self._ctx
        results: list[Any] = []
        for key, value in records:
            set_key(key)
            produced = process(value, ctx)
            if produced is not None:
                results.extend(produced)
        results.extend(self._fire_processing_time())
        if results:
            self.out.push(results)

    def _fire(self, due: list[tuple[int, int, bytes]], domain: TimeDomain) -> list[Any]:
        current = self._backend.current
        on_timer = self._function.on_timer
        ctx = self._ctx
        ctx.time_domain = domain
        results: list[Any] = []
        try:
            for timestamp, key_group, key_bytes in due:
                current.set(deserialize_key(key_bytes), key_bytes, key_group)
                ctx.timestamp = timestamp
                produced = on_timer(timestamp, ctx)
                if produced is not None:
                    results.extend(produced)
        finally:
            ctx.timestamp = ctx.time_domain = None
        return results

    def _fire_processing_time(self) -> list[Any]:
        """One batch of the processing-time timers due now: a timer its own firing
        sets for now again fires at the next chance, not in a loop here."""
        due = self.timers.due("processing_time", self.timers.current_processing_time())
        return self._fire(due, "processing_time") if due else []

    def advance_watermark(self, watermark: int) -> None:
        """Event time reached `watermark`: fire every event-time timer at or before it."""
        if watermark <= self.timers.watermark:
            return
        self.timers.watermark = watermark
        while due := self.timers.due("event_time", watermark):
            results = self._fire(due, "event_time")
            if results:
                self.out.push(results)

    def barrier(self, barrier: Barrier) -> None:
        self._snapshot(self.name, barrier)
        self.out.barrier(barrier)

    def end(self) -> None:
        self._function.close()
        self.out.end()

    def flush(self) -> None:
        fired = self._fire_processing_time()
        if fired:
            self.out.push(fired)
        self.out.flush()


class SinkOperator:
    """Writes into the sink's open transaction; pre-commits it at each barrier."""

    def __init__(self, name: str, writer: SinkWriter, snapshot: SnapshotHook) -> None:
        self.name = name
        self.writer = writer
        self._snapshot = snapshot
        self.ended = False
        self.written = 0

    def push(self, records: list[Any]) -> None:
        write = self.writer.write
        for record in records:
            write(record)
        self.written += len(records)

    def barrier(self, barrier: Barrier) -> None:
        self._snapshot(self.name, barrier)

    def end(self) -> None:
        self.ended = True

    def flush(self) -> None:
        pass


class KeyedExchange:
    """Partitions records by key group over the channels to the downstream subtasks."""

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        channels: Sequence[OutputChannel],
        max_parallelism: int,
        batch_size: int = 512,
    ) -> None:
        self._key_fn = key_fn
        self._channels = list(channels)
        self._max_parallelism = max_parallelism
        self._buffers: list[list[Any]] = [[] for _ in self._channels]
        self._batch_size = batch_size

    def push(self, records: list[Any]) -> None:
        key_fn = self._key_fn
        buffers = self._buffers
        m = self._max_parallelism
        p = len(self._channels)
        full = []
        for record in records:
            key = key_fn(record)
            target = key_group_of_bytes(serialize_key(key), m) * p // m
            buffer = buffers[target]
            buffer.append((key, record))
            if len(buffer) == self._batch_size:
                full.append(target)
        for target in full:
            self._send(target)

    def _send(self, target: int) -> None:
        batch = self._buffers[target]
        if batch:
            self._buffers[target] = []
            self._channels[target].send(batch)

    def flush(self) -> None:
        for target in range(len(self._channels)):
            self._send(target)

    def barrier(self, barrier: Barrier) -> None:
        self.flush()
        for channel in self._channels:
            channel.send(barrier)

    def end(self) -> None:
        self.flush()
        for channel in self._channels:
            channel.send(EndOfStream())
