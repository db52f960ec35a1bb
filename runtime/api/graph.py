"""The job graph: plain frozen data, built by `StreamEnvironment`, validated before
anything runs, and the same on the driver and on every task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

VertexKind = Literal["source", "map", "flat_map", "filter", "process", "window", "sink"]
KEYED_KINDS: tuple[VertexKind, ...] = ("process", "window")
"""Kinds of vertex that keep keyed state (and timers) in a keyed backend."""
STATEFUL_KINDS: tuple[VertexKind, ...] = ("source", *KEYED_KINDS, "sink")
Partitioning = Literal["forward", "key"]


@dataclass(frozen=True)
class Edge:
    """How records travel from `upstream`: to the same subtask, or by key group."""

    upstream: str
    partitioning: Partitioning
    key_fn: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Vertex:
    name: str
    kind: VertexKind
    operator: Any  # the user function, source or sink
    input: Edge | None = None  # None for sources
    watermarks: Any = None  # a source's WatermarkStrategy: its records carry event time

    @property
    def keyed(self) -> bool:
        return self.input is not None and self.input.partitioning == "key"


@dataclass(frozen=True)
class JobGraph:
    """A job's dataflow as `build(env)` declared it: its vertices (sources, functions,
    windows, sinks) and the edges between them."""

    name: str
    vertices: tuple[Vertex, ...]  # in the order they were declared (topological)

    def vertex(self, name: str) -> Vertex:
        """The vertex named `name`."""
        for vertex in self.vertices:
            if vertex.name == name:
                return vertex
        raise KeyError(name)

    def downstream(self, name: str) -> list[Vertex]:
        """The vertices that read the output of the vertex named `name`."""
        return [v for v in self.vertices if v.input is not None and v.input.upstream == name]

    @property
    def sources(self) -> list[Vertex]:
        """The source vertices, in the order they were declared."""
        return [v for v in self.vertices if v.kind == "source"]

    @property
    def sinks(self) -> list[Vertex]:
        """The sink vertices, in the order they were declared."""
        return [v for v in self.vertices if v.kind == "sink"]

    def chains(self) -> list[list[Vertex]]:
        """The chains the engine runs, each on one thread of a task, its vertices
        passing records by plain calls: a chain starts at a source or after a
        keyed exchange (its head, first) and holds every vertex reached from it by
        forward edges, a fan-out's branches too (each record is pushed to one
        branch after the other, as Flink chains an operator with several chained
        outputs). Vertices in graph order, so each comes after its input."""
        chains = []
        for head in self.vertices:
            if head.input is not None and not head.keyed:
                continue  # it runs in its upstream's chain
            members, frontier = {head.name}, [head]
            while frontier:
                following = [v for v in self.downstream(frontier.pop().name) if not v.keyed]
                members.update(v.name for v in following)
                frontier += following
            chains.append([v for v in self.vertices if v.name in members])
        return chains
