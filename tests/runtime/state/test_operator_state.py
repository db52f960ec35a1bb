"""Operator state: list (even split), union list and broadcast redistribution."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lockgate.runtime.state.operator_state import (
    OperatorStateSnapshot,
    OperatorStateStore,
    redistribute,
)


def _stores_after_rescale(old: list[OperatorStateStore], parallelism: int) -> list[OperatorStateStore]:
    snapshots = [OperatorStateSnapshot.decode(s.snapshot().encode()) for s in old]
    new = []
    for assigned in redistribute(snapshots, parallelism):
        store = OperatorStateStore()
        store.restore(assigned)
        new.append(store)
    return new


def _old(elements_per_subtask: list[list[int]]) -> list[OperatorStateStore]:
    stores = []
    for i, elements in enumerate(elements_per_subtask):
        store = OperatorStateStore()
        store.list_state("offsets").add_all(elements)
        store.union_list_state("seen").add(f"subtask-{i}")
        rules = store.broadcast_state("rules")
        rules.put("threshold", 10)
        rules.put(("rule", 2), {"on": True})
        stores.append(store)
    return stores


@given(
    st.lists(st.lists(st.integers(), max_size=8), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=8),
)
def test_list_state_is_split_evenly_and_nothing_is_lost(old_elements, parallelism) -> None:
    new = _stores_after_rescale(_old(old_elements), parallelism)
    shares = [s.list_state("offsets").get() for s in new]
    assert [x for share in shares for x in share] == [x for e in old_elements for x in e]
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1


def test_union_list_state_gives_everything_to_everyone() -> None:
    new = _stores_after_rescale(_old([[1], [2], [3]]), 2)
    for store in new:
        assert store.union_list_state("seen").get() == ["subtask-0", "subtask-1", "subtask-2"]


def test_broadcast_state_is_identical_everywhere() -> None:
    new = _stores_after_rescale(_old([[1], [2]]), 5)
    for store in new:
        assert dict(store.broadcast_state("rules").items()) == {
            "threshold": 10,
            ("rule", 2): {"on": True},
        }


def test_state_not_requested_after_restore_survives_the_next_snapshot() -> None:
    (store,) = _stores_after_rescale(_old([[1, 2]]), 1)
    store.list_state("offsets")  # the others are never asked for
    (again,) = _stores_after_rescale([store], 1)
    assert again.union_list_state("seen").get() == ["subtask-0"]
    assert again.broadcast_state("rules").get("threshold") == 10


def test_changing_the_mode_of_a_restored_state_is_refused() -> None:
    (store,) = _stores_after_rescale(_old([[1]]), 1)
    with pytest.raises(ValueError, match="offsets"):
        store.union_list_state("offsets")


def test_one_name_one_mode() -> None:
    store = OperatorStateStore()
    store.list_state("x")
    with pytest.raises(ValueError, match="'x'"):
        store.broadcast_state("x")


def test_broadcast_state_map_operations() -> None:
    rules = OperatorStateStore().broadcast_state("rules")
    rules.put("a", 1)
    assert rules.contains("a")
    assert rules.get("b") is None
    rules.remove("a")
    assert list(rules.keys()) == []
    rules.put("c", 3)
    assert list(rules.values()) == [3]
    rules.clear()
    assert list(rules.items()) == []
