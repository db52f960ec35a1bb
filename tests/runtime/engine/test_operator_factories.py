"""Operators by vertex kind: one registration each, an unknown kind named."""

from __future__ import annotations

from datetime import timedelta

import pytest
from lockgate.runtime import CollectSink, GeneratorSource, StreamEnvironment, TumblingEventTimeWindows
from lockgate.runtime.api.graph import Vertex
from lockgate.runtime.api.windows import WindowSpec
from lockgate.runtime.engine.operator_factories import ChainContext, make_operator, register
from lockgate.runtime.engine.operators import MapOperator
from lockgate.runtime.engine.window_operator import LateRecords
from lockgate.testing import run_job


class _Collect:
    def __init__(self) -> None:
        self.records: list[object] = []

    def push(self, records: list[object], timestamps: object = None) -> None:
        self.records += records


def _context() -> ChainContext:
    return ChainContext(0, 1, lambda vertex, barrier: None, lambda name: None, lambda name: LateRecords())


def test_a_vertex_gets_the_operator_its_kind_registered() -> None:
    out = _Collect()
    operator = make_operator(Vertex("double", "map", lambda n: 2 * n), out, _context())  # type: ignore[arg-type]
    assert isinstance(operator, MapOperator)
    operator.push([1, 2])
    assert out.records == [2, 4]


def test_an_unknown_kind_and_a_second_registration_are_named() -> None:
    with pytest.raises(
        ValueError,
        match=r"'j' is of kind 'join', which no operator runs \(known: filter, flat_map, map, process, window\)",
    ):
        make_operator(Vertex("j", "join", None), _Collect(), _context())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind 'map' is registered already"):
        register("map")(lambda vertex, out, context: out)


@pytest.mark.parametrize("kind", ["process", "window"])
def test_a_keyed_vertex_without_keyed_state_is_named(kind: str) -> None:
    operator = None if kind == "process" else WindowSpec(TumblingEventTimeWindows.of(timedelta(seconds=1)))
    with pytest.raises(ValueError, match="'count' processes keyed records but has no keyed state"):
        make_operator(Vertex("count", kind, operator), _Collect(), _context())  # type: ignore[arg-type]


def test_after_key_by_a_map_filter_flat_map_or_sink_sees_the_records_themselves() -> None:
    """As in Flink: `key_by` partitions; only a keyed operator (process, window) sees
    the key the exchange routed by."""
    records = [{"n": n, "key": n % 3} for n in range(50)]

    def build(env: StreamEnvironment) -> None:
        keyed = env.source(GeneratorSource(len(records), keys=3), name="in").key_by(lambda r: r["key"])
        keyed.sink(CollectSink("direct"), name="direct")
        keyed.map(lambda r: r["n"], name="mapped").sink(CollectSink("map"), name="map")
        keyed.filter(lambda r: r["n"] % 2 == 0, name="even").sink(CollectSink("filter"), name="filter")
        keyed.flat_map(lambda r: [r["n"]] * 2, name="twice").sink(CollectSink("flat_map"), name="flat_map")

    outputs = run_job(build, parallelism=2).outputs
    assert sorted(outputs["direct"], key=lambda r: r["n"]) == records
    assert sorted(outputs["map"]) == list(range(50))
    assert sorted(r["n"] for r in outputs["filter"]) == list(range(0, 50, 2))
    assert sorted(outputs["flat_map"]) == sorted(list(range(50)) * 2)
