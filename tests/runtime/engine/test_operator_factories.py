"""Operators by vertex kind: one registration each, an unknown kind named."""

from __future__ import annotations

import pytest
from lockgate.runtime.api.graph import Vertex
from lockgate.runtime.engine.operator_factories import ChainContext, make_operator, register
from lockgate.runtime.engine.operators import MapOperator


class _Collect:
    def __init__(self) -> None:
        self.records: list[object] = []

    def push(self, records: list[object], timestamps: object = None) -> None:
        self.records += records


def _context() -> ChainContext:
    return ChainContext(0, 1, lambda vertex, barrier: None, lambda name: None)


def test_a_vertex_gets_the_operator_its_kind_registered() -> None:
    out = _Collect()
    operator = make_operator(Vertex("double", "map", lambda n: 2 * n), out, _context())  # type: ignore[arg-type]
    assert isinstance(operator, MapOperator)
    operator.push([1, 2])
    assert out.records == [2, 4]


def test_an_unknown_kind_and_a_second_registration_are_named() -> None:
    with pytest.raises(
        ValueError,
        match=r"'w' is of kind 'window', which no operator runs \(known: filter, flat_map, map, process\)",
    ):
        make_operator(Vertex("w", "window", None), _Collect(), _context())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind 'map' is registered already"):
        register("map")(lambda vertex, out, context: out)


def test_a_process_vertex_without_keyed_state_is_named() -> None:
    with pytest.raises(ValueError, match="'count' processes keyed records but has no keyed state"):
        make_operator(Vertex("count", "process", None), _Collect(), _context())
