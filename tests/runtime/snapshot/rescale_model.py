"""A model job state for rescale tests: known keys in every state kind."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lockgate.runtime import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
    key_group,
    key_group_range,
    operator_index,
)
from lockgate.runtime.state.backend import KeyedStateBackend

from tests.conftest import Average, make_backend
from tests.vertex_snapshots import LocalSubtask

DESCRIPTORS: dict[str, StateDescriptor] = {
    "value": ValueStateDescriptor("value"),
    "list": ListStateDescriptor("list"),
    "map": MapStateDescriptor("map"),
    "reducing": ReducingStateDescriptor("reducing", lambda a, b: a + b),
    "aggregating": AggregatingStateDescriptor("aggregating", Average()),
}


def write(state: Any, kind: str, key: Any, n: int) -> None:
    """Give `key` its model contents in `state` (n: a number derived from the key)."""
    if kind == "value":
        state.update({"key": key, "n": n})
    elif kind == "list":
        state.add_all([n, n + 1, str(key)])
    elif kind == "map":
        state.put_all({"n": n, ("pair", n): [key]})
    else:
        state.add(n)
        state.add(2 * n)


def expected(kind: str, key: Any, n: int) -> Any:
    return {
        "value": {"key": key, "n": n},
        "list": [n, n + 1, str(key)],
        "map": {"n": n, ("pair", n): [key]},
        "reducing": 3 * n,
        "aggregating": 1.5 * n,
    }[kind]


def read(state: Any, kind: str) -> Any:
    if kind == "value":
        return state.value()
    if kind == "map":
        return dict(state.items())
    return state.get()


def build(
    backend_kind: str,
    max_parallelism: int,
    parallelism: int,
    local_dir: Path,
    native: bool = False,
) -> list[LocalSubtask]:
    subtasks = []
    for index in range(parallelism):
        groups = key_group_range(max_parallelism, parallelism, index)
        directory = local_dir / f"p{parallelism}"
        backend = make_backend(backend_kind, max_parallelism, groups, directory, incremental=native)
        subtasks.append(LocalSubtask(backend))
    return subtasks


def fill(subtasks: list[LocalSubtask], kinds: Iterable[str], keys: list[Any]) -> None:
    parallelism = len(subtasks)
    for n, key in enumerate(keys):
        backend = owner(subtasks, key)
        backend.set_current_key(key)
        for kind in kinds:
            write(backend.state(DESCRIPTORS[kind]), kind, key, n)
    assert parallelism >= 1


def owner(subtasks: list[LocalSubtask], key: Any) -> KeyedStateBackend:
    first = subtasks[0].keyed
    assert first is not None
    m = first.max_parallelism
    backend = subtasks[operator_index(key_group(key, m), m, len(subtasks))].keyed
    assert backend is not None
    return backend


def verify(subtasks: list[LocalSubtask], kinds: Iterable[str], keys: list[Any]) -> None:
    """Every key is on the subtask `operator_index` names, with its values; nothing else is."""
    kinds = list(kinds)
    for n, key in enumerate(keys):
        backend = owner(subtasks, key)
        backend.set_current_key(key)
        for kind in kinds:
            assert read(backend.state(DESCRIPTORS[kind]), kind) == expected(kind, key, n), (
                kind,
                key,
            )
    stored = sum(row_count(s.keyed) for s in subtasks if s.keyed is not None)
    map_rows = 2 if "map" in kinds else 0
    assert stored == len(keys) * (len(kinds) - (1 if map_rows else 0) + map_rows)


def row_count(backend: KeyedStateBackend) -> int:
    """Rows stored in every key group, foreign ones included (there must be none)."""
    frozen = backend.freeze()
    try:
        count = 0
        for table in frozen.values():
            for group in range(backend.max_parallelism):
                rows = sum(1 for _ in table.entries(group))
                assert rows == 0 or group in backend.key_groups, f"foreign key group {group}"
                count += rows
        return count
    finally:
        for table in frozen.values():
            table.release()


def close(subtasks: list[LocalSubtask]) -> None:
    for subtask in subtasks:
        if subtask.keyed is not None:
            subtask.keyed.close()
