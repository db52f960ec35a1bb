"""Declaring a dataflow: `StreamEnvironment` and the streams it hands out.

def build(env):
    (env.source(LogSource("file:///data/lines"), name="lines")
        .flat_map(str.split)
        .key_by(lambda word: word)
        .process(CountWords(), name="count")
        .sink(FileSink("file:///data/out"), name="out"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from lockgate.runtime.api.connectors import Sink, Source
from lockgate.runtime.api.functions import KeyedProcessFunction
from lockgate.runtime.api.graph import Edge, JobGraph, Vertex, VertexKind
from lockgate.runtime.api.job_args import JobArgs
from lockgate.runtime.api.validation import JobDefinitionError, check_callable, milliseconds, validate
from lockgate.runtime.api.watermarks import WatermarkStrategy
from lockgate.runtime.api.windows import (
    ProcessWindowFunction,
    Reducing,
    WindowAssigner,
    WindowResultFunction,
    WindowSpec,
    check_window_spec,
)
from lockgate.runtime.state.descriptors import AggregateFunction


def _expect(value: object, expected: type, needs: str) -> None:
    """Refuse a `value` that is no `expected`: the message is `needs` and the type it got."""
    if not isinstance(value, expected):
        raise JobDefinitionError(f"{needs}, got {type(value).__qualname__}")


class StreamEnvironment:
    """Collects the vertices of one job as `build(env)` declares them."""

    def __init__(self, name: str = "job", args: Mapping[str, str] | None = None) -> None:
        self.name = name
        # The job's own settings (`lockgate run --arg k=v`, the manifest's job.args).
        self.args = JobArgs(args)
        self._vertices: list[Vertex] = []

    def _add(self, vertex: Vertex) -> DataStream:
        self._vertices.append(vertex)
        return DataStream(self, vertex.name)

    def _name(self, given: str | None, kind: str) -> str:
        if given is not None:
            return given
        taken = {v.name for v in self._vertices}
        index = 1
        while f"{kind}-{index}" in taken:
            index += 1
        return f"{kind}-{index}"

    def source(
        self, source: Source, name: str | None = None, watermarks: WatermarkStrategy | None = None
    ) -> DataStream:
        """`watermarks`: the source's records carry event time (timers, windows)."""
        _expect(source, Source, "env.source() needs a Source (LogSource, GeneratorSource, ...)")
        vertex_name = self._name(name, "source")
        if watermarks is not None:
            _expect(
                watermarks,
                WatermarkStrategy,
                f"source {vertex_name!r}: watermarks= takes a WatermarkStrategy",
            )
            if watermarks.timestamp_assigner is None:
                raise JobDefinitionError(
                    f"source {vertex_name!r}: its records carry no timestamp of their own; give the "
                    "strategy one with .with_timestamp_assigner(lambda record: ...)"
                )
        return self._add(Vertex(vertex_name, "source", source, watermarks=watermarks))

    def graph(self) -> JobGraph:
        """The validated, frozen graph of what was declared."""
        graph = JobGraph(self.name, tuple(self._vertices))
        validate(graph)
        return graph


class DataStream:
    """The output of one vertex; each operation adds a vertex reading it."""

    def __init__(self, env: StreamEnvironment, upstream: str, key_fn: Any = None) -> None:
        self._env = env
        self._upstream = upstream
        self._key_fn = key_fn

    def _then(self, kind: VertexKind, operator: Any, name: str | None) -> DataStream:
        edge = Edge(self._upstream, "forward" if self._key_fn is None else "key", self._key_fn)
        vertex = Vertex(self._env._name(name, kind), kind, operator, edge)
        return self._env._add(vertex)

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """A stream of `fn(record)` for each record."""
        check_callable("map", fn)
        return self._then("map", fn, name)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> DataStream:
        """A stream of every element of `fn(record)` (an iterable, possibly empty) for each
        record."""
        check_callable("flat_map", fn)
        return self._then("flat_map", fn, name)

    def filter(self, fn: Callable[[Any], bool], name: str | None = None) -> DataStream:
        """A stream of the records for which `fn(record)` is true."""
        check_callable("filter", fn)
        return self._then("filter", fn, name)

    def key_by(self, key_fn: Callable[[Any], Any]) -> KeyedStream:
        """Partition by `key_fn(record)`: each key's records go to the subtask that owns
        its key group, where keyed state for that key lives."""
        check_callable("key_by", key_fn)
        return KeyedStream(self._env, self._upstream, key_fn)

    def process(self, function: KeyedProcessFunction, name: str | None = None) -> DataStream:
        """Refused on a stream that is not keyed: a KeyedProcessFunction reads keyed state,
        so call `.key_by(...)` first."""
        label = name or type(function).__qualname__
        raise JobDefinitionError(
            f"process({label}) reads keyed state, which needs a keyed stream: "
            "call .key_by(lambda record: ...) before .process(...)"
        )

    def sink(self, sink: Sink, name: str | None = None) -> None:
        """Write the stream to `sink` (FileSink, KafkaSink, CollectSink, ...). `name`
        identifies the sink's state in checkpoints: keep it stable across versions of a
        job."""
        _expect(sink, Sink, ".sink() needs a Sink (FileSink, CollectSink, ...)")
        self._then("sink", sink, name)


class KeyedStream(DataStream):
    """A stream partitioned by key (`DataStream.key_by`): keyed functions and windows see
    one key's records at a time, with that key's state."""

    def process(self, function: KeyedProcessFunction, name: str | None = None) -> DataStream:
        """Run `function` (a KeyedProcessFunction) on each record, with the record's key's
        state and timers; what it returns or yields goes downstream. `name` identifies
        its state in checkpoints: keep it stable across versions of a job."""
        if not isinstance(function, KeyedProcessFunction):
            raise JobDefinitionError(
                f".process() needs a KeyedProcessFunction instance, got "
                f"{type(function).__qualname__}; subclass lockgate.runtime.KeyedProcessFunction"
            )
        return self._then("process", function, name)

    def window(self, assigner: WindowAssigner) -> WindowedStream:
        """Group each key's records into the windows `assigner` gives them."""
        _expect(
            assigner,
            WindowAssigner,
            ".window() needs a window assigner (TumblingEventTimeWindows.of(...), ...)",
        )
        return WindowedStream(self, WindowSpec(assigner))


class WindowedStream:
    """A keyed stream's windows; `process`, `aggregate` or `reduce` says what a fired
    window emits."""

    def __init__(self, keyed: KeyedStream, spec: WindowSpec) -> None:
        self._keyed = keyed
        self._spec = spec

    def allowed_lateness(self, lateness: timedelta) -> WindowedStream:
        """Keep each window this long after it fired: a late record within it fires
        the window again, with the record."""
        ms = milliseconds(lateness, ".allowed_lateness()", positive=False)
        return WindowedStream(self._keyed, replace(self._spec, allowed_lateness_ms=ms))

    def _vertex(self, spec: WindowSpec, name: str | None, label: str) -> DataStream:
        check_window_spec(spec, name or label)
        return self._keyed._then("window", spec, name)

    def process(self, function: ProcessWindowFunction, name: str | None = None) -> DataStream:
        """Emit what `function.process(key, window, elements, ctx)` yields when a window
        fires; the window keeps every element until then."""
        _expect(function, ProcessWindowFunction, "window .process() needs a ProcessWindowFunction instance")
        return self._vertex(replace(self._spec, function=function), name, type(function).__qualname__)

    def aggregate(
        self,
        function: AggregateFunction[Any, Any, Any],
        window_function: WindowResultFunction | None = None,
        name: str | None = None,
    ) -> DataStream:
        """Keep one accumulator of `function` per window; when a window fires, emit
        `window_function(key, window, result)` if given, else the result. Session
        windows need `function.merge`."""
        _expect(function, AggregateFunction, ".aggregate() needs an AggregateFunction instance")
        spec = replace(self._spec, aggregate=function, window_function=window_function)
        return self._vertex(spec, name, type(function).__qualname__)

    def reduce(
        self,
        fn: Callable[[Any, Any], Any],
        window_function: WindowResultFunction | None = None,
        name: str | None = None,
    ) -> DataStream:
        """Keep one value per window, folded with `fn(a, b)`; when a window fires, emit
        `window_function(key, window, value)` if given, else the value."""
        check_callable("reduce", fn)
        return self._vertex(
            replace(self._spec, aggregate=Reducing(fn), window_function=window_function), name, "reduce"
        )
