"""From a vertex of the job graph to the operator that runs it in a chain: one
registration per kind of vertex (a new kind — a window, say — adds one).

Sinks are not here: a sink's writer takes part in the task's two-phase commit,
so the task makes it (`task.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockgate.runtime.api.functions import KeyedProcessFunction
from lockgate.runtime.api.graph import Vertex
from lockgate.runtime.engine.operators import (
    FilterOperator,
    FlatMapOperator,
    MapOperator,
    Output,
    ProcessOperator,
    SnapshotHook,
)
from lockgate.runtime.engine.window_operator import LateRecords, WindowProcess
from lockgate.runtime.state.backend import KeyedStateBackend


@dataclass(frozen=True)
class ChainContext:
    """What an operator of a chain may use of its task, and nothing more."""

    subtask: int
    parallelism: int
    snapshot: SnapshotHook  # takes the synchronous part of the vertex's snapshot at a barrier
    keyed_backend: Callable[[str], KeyedStateBackend | None]  # a keyed vertex's state
    late_records: Callable[[str], LateRecords]  # what a window vertex counts as dropped late


OperatorFactory = Callable[[Vertex, Output, ChainContext], Output]
_FACTORIES: dict[str, OperatorFactory] = {}
_ENTERING_KEYS: set[str] = set()


def register(kind: str, *, enters_keys: bool = False) -> Callable[[OperatorFactory], OperatorFactory]:
    """`enters_keys`: the operator sets each record's key current for keyed state,
    so the keyed exchange before it sends `KeyedRecord`s."""

    def registering(factory: OperatorFactory) -> OperatorFactory:
        if kind in _FACTORIES:
            raise ValueError(f"an operator for vertices of kind {kind!r} is registered already")
        _FACTORIES[kind] = factory
        if enters_keys:
            _ENTERING_KEYS.add(kind)
        return factory

    return registering


def takes_keyed_records(kind: str) -> bool:
    """Whether a vertex of `kind` after a `key_by` takes `KeyedRecord`s; any other (a
    map, filter or sink there) takes the records themselves, partitioned by key."""
    return kind in _ENTERING_KEYS


def make_operator(vertex: Vertex, out: Output, context: ChainContext) -> Output:
    """The operator of `vertex`, pushing what it produces to `out`."""
    if (factory := _FACTORIES.get(vertex.kind)) is None:
        raise ValueError(
            f"vertex {vertex.name!r} is of kind {vertex.kind!r}, which no operator runs "
            f"(known: {', '.join(sorted(_FACTORIES))})"
        )
    return factory(vertex, out, context)


def _stateless(operator: Callable[[Callable[[Any], Any], Output], Output]) -> OperatorFactory:
    """A map, flat_map or filter: the vertex's function, applied by `operator`, keeps no state."""
    return lambda vertex, out, context: operator(vertex.operator, out)


register("map")(_stateless(MapOperator))
register("flat_map")(_stateless(FlatMapOperator))
register("filter")(_stateless(FilterOperator))


def _keyed(vertex: Vertex, function: KeyedProcessFunction, out: Output, context: ChainContext) -> Output:
    if (backend := context.keyed_backend(vertex.name)) is None:
        raise ValueError(f"vertex {vertex.name!r} processes keyed records but has no keyed state")
    subtask = (context.subtask, context.parallelism)
    return ProcessOperator(
        vertex.name, function, backend=backend, context=subtask, out=out, snapshot=context.snapshot
    )


@register("process", enters_keys=True)
def _process(vertex: Vertex, out: Output, context: ChainContext) -> Output:
    # Each subtask gets its own instance: open() stores state handles on it.
    return _keyed(vertex, copy.deepcopy(vertex.operator), out, context)


@register("window", enters_keys=True)
def _window(vertex: Vertex, out: Output, context: ChainContext) -> Output:
    spec = copy.deepcopy(vertex.operator)
    return _keyed(vertex, WindowProcess(vertex.name, spec, context.late_records(vertex.name)), out, context)
