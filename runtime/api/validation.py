"""Checks on a job graph before anything runs; each error names the culprit and
says how to fix it. `validate` looks at the graph alone; `validate_connectors`
asks each source and sink whether it can write where it is told to (on the driver: it touches
storage)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from lockgate.runtime.api.connectors import JobIdentity
from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.failure_class import FailureClass

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class JobDefinitionError(ValueError):
    """The job's dataflow is not valid as declared."""

    failure_class = FailureClass.DEFINITION


def milliseconds(value: Any, what: str, *, positive: bool = True) -> int:
    """A `timedelta` a job declares (a window size, a lateness), in whole milliseconds."""
    if not isinstance(value, timedelta):
        raise JobDefinitionError(f"{what} takes a datetime.timedelta, got {type(value).__name__} {value!r}")
    ms = round(value.total_seconds() * 1000)
    if ms < 0 or (positive and ms == 0):
        raise JobDefinitionError(f"{what} must be {'positive' if positive else 'zero or more'}, got {value}")
    return ms


def check_callable(operation: str, fn: Any) -> None:
    if not callable(fn):
        raise JobDefinitionError(f".{operation}() needs a function, got {type(fn).__qualname__} {fn!r}")


def _reaches_sink(graph: JobGraph, name: str, memo: dict[str, bool]) -> bool:
    if name not in memo:
        vertex = graph.vertex(name)
        memo[name] = vertex.kind == "sink" or any(
            _reaches_sink(graph, v.name, memo) for v in graph.downstream(name)
        )
    return memo[name]


def validate(graph: JobGraph) -> None:
    if not graph.sources:
        raise JobDefinitionError("the job declares no source: start it with env.source(...)")
    seen: dict[str, str] = {}
    for vertex in graph.vertices:
        if not _NAME.match(vertex.name):
            raise JobDefinitionError(
                f"{vertex.kind} name {vertex.name!r} is not valid: use up to 128 letters, "
                "digits, '.', '_' and '-', starting with a letter or digit"
            )
        if vertex.name in seen:
            raise JobDefinitionError(
                f"two vertices are named {vertex.name!r} (a {seen[vertex.name]} and a "
                f"{vertex.kind}): names must be unique, they name each vertex's state in "
                "checkpoints; pass name=... to tell them apart"
            )
        seen[vertex.name] = vertex.kind
    if not graph.sinks:
        raise JobDefinitionError(
            "the job declares no sink, so nothing it computes is kept: end a stream with "
            ".sink(FileSink(...), name=...)"
        )
    memo: dict[str, bool] = {}
    for vertex in graph.vertices:
        if not _reaches_sink(graph, vertex.name, memo):
            raise JobDefinitionError(
                f"{vertex.kind} {vertex.name!r} leads to no sink, so its output would be "
                "discarded: add .sink(...) after it, or remove it"
            )


def validate_connectors(graph: JobGraph, job: JobIdentity) -> None:
    for vertex in [*graph.sources, *graph.sinks]:
        try:
            vertex.operator.validate(job)
        except ValueError as error:
            raise JobDefinitionError(f"{vertex.kind} {vertex.name!r}: {error}") from error
