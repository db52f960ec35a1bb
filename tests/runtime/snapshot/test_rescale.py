"""Snapshot at parallelism P1, restore at P2: every key lands on its owner, intact."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.runtime.snapshot import rescale_model as model
from tests.vertex_snapshots import restore_vertex, snapshot_vertex

_checkpoint_ids = itertools.count(1)

keys = st.lists(
    st.one_of(st.integers(), st.text(max_size=8), st.tuples(st.text(max_size=3), st.integers())),
    unique=True,
    max_size=60,
)


def _round_trip(
    storage: CheckpointStorage,
    local_dir: Path,
    source: str,
    target: str,
    native: bool,
    m: int,
    p1: int,
    p2: int,
    kinds: list[str],
    key_list: list[object],
) -> None:
    checkpoint_id = next(_checkpoint_ids)
    old = model.build(source, m, p1, local_dir / f"old-{checkpoint_id}", native=native)
    new = model.build(target, m, p2, local_dir / f"new-{checkpoint_id}")
    try:
        model.fill(old, kinds, key_list)
        snapshot_dir = storage.checkpoint_dir("job", checkpoint_id)
        snapshot_vertex(storage, snapshot_dir, ("job", checkpoint_id, "checkpoint"), "v", old)
        restore_vertex(storage, snapshot_dir, "v", new)
        model.verify(new, kinds, key_list)
    finally:
        model.close(old)
        model.close(new)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.data(),
    fmt=st.sampled_from(["canonical", "native"]),
    m=st.sampled_from([4, 16, 128]),
    kinds=st.lists(st.sampled_from(sorted(model.DESCRIPTORS)), min_size=1, unique=True),
    key_list=keys,
)
def test_property_snapshot_at_p1_restores_at_p2(
    storage: CheckpointStorage, tmp_path: Path, data, fmt, m, kinds, key_list
) -> None:
    p1 = data.draw(st.integers(min_value=1, max_value=min(m, 6)), label="p1")
    p2 = data.draw(st.integers(min_value=1, max_value=min(m, 6)), label="p2")
    native = fmt == "native"
    source = "rocksdb" if native else data.draw(st.sampled_from(["heap", "rocksdb"]), label="src")
    target = "rocksdb" if native else data.draw(st.sampled_from(["heap", "rocksdb"]), label="dst")
    _round_trip(storage, tmp_path, source, target, native, m, p1, p2, kinds, key_list)


ALL_KINDS = sorted(model.DESCRIPTORS)
KEYS = [f"user-{i}" for i in range(300)] + list(range(200)) + [("t", i) for i in range(100)]


@pytest.mark.parametrize(("p1", "p2"), [(2, 3), (3, 2), (4, 1), (1, 16), (3, 16), (16, 5)])
@pytest.mark.parametrize(
    ("source", "target", "native"),
    [
        ("heap", "heap", False),
        ("heap", "rocksdb", False),
        ("rocksdb", "heap", False),
        ("rocksdb", "rocksdb", False),
        ("rocksdb", "rocksdb", True),
    ],
)
def test_rescale_up_down_to_one_and_to_max(
    storage: CheckpointStorage, tmp_path: Path, p1, p2, source, target, native
) -> None:
    _round_trip(storage, tmp_path, source, target, native, 16, p1, p2, ALL_KINDS, KEYS)


def test_memory_filesystem_storage(tmp_path: Path) -> None:
    storage = CheckpointStorage("memory://lockgate-test")
    _round_trip(storage, tmp_path, "heap", "rocksdb", False, 16, 2, 3, ALL_KINDS, KEYS[:50])
