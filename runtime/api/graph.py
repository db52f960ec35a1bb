"""The job graph: plain frozen data, built by `StreamEnvironment`, validated before
anything runs, and the same on the driver and on every task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

VertexKind = Literal["source", "map", "flat_map", "filter", "process", "sink"]
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

    @property
    def keyed(self) -> bool:
        return self.input is not None and self.input.partitioning == "key"


@dataclass(frozen=True)
class JobGraph:
    name: str
    vertices: tuple[Vertex, ...]  # in the order they were declared (topological)

    def vertex(self, name: str) -> Vertex:
        for vertex in self.vertices:
            if vertex.name == name:
                return vertex
        raise KeyError(name)

    def downstream(self, name: str) -> list[Vertex]:
        return [v for v in self.vertices if v.input is not None and v.input.upstream == name]

    @property
    def sources(self) -> list[Vertex]:
        return [v for v in self.vertices if v.kind == "source"]

    @property
    def sinks(self) -> list[Vertex]:
        return [v for v in self.vertices if v.kind == "sink"]

    def continues_chain(self, vertex: Vertex) -> bool:
        """True when `vertex` runs in its upstream's chain: a forward edge from a
        vertex with no other downstream."""
        edge = vertex.input
        return (
            edge is not None and edge.partitioning == "forward" and len(self.downstream(edge.upstream)) == 1
        )

    def chains(self) -> list[list[Vertex]]:
        """Vertices that run together in one task, passing records by plain calls."""
        chains = []
        for head in self.vertices:
            if self.continues_chain(head):
                continue
            chain = [head]
            while True:
                following = self.downstream(chain[-1].name)
                if len(following) != 1 or not self.continues_chain(following[0]):
                    break
                chain.append(following[0])
            chains.append(chain)
        return chains
