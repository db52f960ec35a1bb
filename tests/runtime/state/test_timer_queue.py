"""Timers as keyed state, one contract for both backends: order, dedupe, deletion,
and snapshots that carry them to another parallelism and another backend."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import StateMigrationError
from lockgate.runtime.state.timers import TimerQueue, encode_timestamp

from tests.conftest import make_backend
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex

M = 16
QUEUE = "_timers.event_time"
_ids = itertools.count(1)


def _add(backend: CheckpointableKeyedStateBackend, queue: TimerQueue, key: object, timestamp: int) -> None:
    queue.add(key_group(key, backend.max_parallelism), timestamp, serialize_key(key))


def _drain(queue: TimerQueue, up_to: int = 2**62) -> list[tuple[int, bytes]]:
    """Every due timer, as (timestamp, key), checking that each key's came in time order."""
    fired = []
    while due := queue.pop_due(up_to, limit=7):
        fired.extend((timestamp, key) for timestamp, _, key in due)
    for key in {key for _, key in fired}:
        mine = [timestamp for timestamp, k in fired if k == key]
        assert mine == sorted(mine), f"the timers of {key!r} fired out of time order: {mine}"
    return fired


def test_timers_fire_in_time_order_and_only_when_due(backend: CheckpointableKeyedStateBackend) -> None:
    queue = backend.timer_queue(QUEUE)
    assert queue.earliest() is None
    timers = [(key, timestamp) for key in range(40) for timestamp in (-5, 0, 3, 1_000 + key, 2**40)]
    random.Random(7).shuffle(timers)
    for key, timestamp in timers:
        _add(backend, queue, key, timestamp)
    assert queue.earliest() == -5, "negative timestamps sort before positive ones"
    assert queue.pop_due(-6) == []
    fired = _drain(queue, up_to=1_019)
    expected = sorted((t, serialize_key(k)) for k, t in timers if t <= 1_019)
    assert sorted(fired) == expected, "every due timer once"
    assert len(fired) == len(expected)
    assert queue.earliest() == 1_020
    assert sorted(_drain(queue)) == sorted((t, serialize_key(k)) for k, t in timers if t > 1_019)
    assert queue.earliest() is None


def test_a_timer_registered_twice_fires_once_and_a_deleted_one_never(
    backend: CheckpointableKeyedStateBackend,
) -> None:
    queue = backend.timer_queue(QUEUE)
    for _ in range(3):
        _add(backend, queue, "a", 10)
    _add(backend, queue, "b", 5)
    _add(backend, queue, "c", 20)
    queue.remove(key_group("b", backend.max_parallelism), 5, serialize_key("b"))
    queue.remove(key_group("b", backend.max_parallelism), 5, serialize_key("b"))  # again: no error
    assert queue.earliest() == 10, "the deleted earliest timer no longer counts"
    assert sorted(_drain(queue)) == [(10, serialize_key("a")), (20, serialize_key("c"))]


def test_deleting_and_registering_many_leaves_only_the_live_timers(
    backend: CheckpointableKeyedStateBackend,
) -> None:
    queue = backend.timer_queue(QUEUE)
    live = {}
    for round_ in range(50):  # a deduplication window moving on: each key's expiry moves out
        for key in range(20):
            if key in live:
                queue.remove(key_group(key, backend.max_parallelism), live[key], serialize_key(key))
            live[key] = 1_000 * round_ + key
            _add(backend, queue, key, live[key])
    assert sorted(_drain(queue)) == sorted((t, serialize_key(k)) for k, t in live.items())


def test_a_timer_queue_and_a_keyed_state_cannot_share_a_name(
    backend: CheckpointableKeyedStateBackend,
) -> None:
    backend.state(ValueStateDescriptor("count", default=0))
    with pytest.raises(StateMigrationError, match="'count' is a value state"):
        backend.timer_queue("count")
    backend.timer_queue(QUEUE)
    with pytest.raises(StateMigrationError, match=QUEUE):
        backend.state(ValueStateDescriptor(QUEUE, default=0))


def test_a_timestamp_outside_64_bits_is_refused(backend: CheckpointableKeyedStateBackend) -> None:
    with pytest.raises(ValueError, match="64 signed bits"):
        encode_timestamp(2**63)
    queue = backend.timer_queue(QUEUE)
    for timestamp in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError, match="64 signed bits"):
            _add(backend, queue, "a", timestamp)
    assert queue.earliest() is None, "nothing that could not be snapshotted was kept"


def _subtasks(kind: str, parallelism: int, local: Path) -> list[LocalSubtask]:
    return [
        LocalSubtask(
            make_backend(kind, M, key_group_range(M, parallelism, i), local / f"{kind}-{i}", incremental=True)
        )
        for i in range(parallelism)
    ]


@pytest.mark.parametrize(("p1", "p2"), [(2, 3), (3, 1), (1, 4)])
@pytest.mark.parametrize(
    ("source", "target", "kind"),
    [
        ("heap", "rocksdb", "savepoint"),
        ("rocksdb", "heap", "savepoint"),
        ("heap", "heap", "checkpoint"),
        ("rocksdb", "rocksdb", "checkpoint"),  # native, incremental
    ],
)
@pytest.mark.parametrize("registered_first", [False, True])
def test_timers_move_with_their_key_groups_to_another_parallelism(
    tmp_path: Path, p1: int, p2: int, source: str, target: str, kind: str, registered_first: bool
) -> None:
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    old, new = _subtasks(source, p1, tmp_path / "old"), _subtasks(target, p2, tmp_path / "new")
    timers = {(key, 100 + (key * 7) % 13) for key in range(200)} | {(f"k{key}", -key) for key in range(50)}
    try:
        for key, timestamp in timers:
            owner = next(s.keyed for s in old if s.keyed and key_group(key, M) in s.keyed.key_groups)
            assert owner is not None
            _add(owner, owner.timer_queue(QUEUE), key, timestamp)
        native = target == "rocksdb" and kind == "checkpoint"  # restores only into a fresh database
        if registered_first and not native:  # a queue the operator opened, and read, before the restore
            for subtask in new:
                assert subtask.keyed is not None
                assert subtask.keyed.timer_queue(QUEUE).earliest() is None
        n = next(_ids)
        directory = storage.checkpoint_dir("job", n)
        snapshot_vertex(storage, directory, ("job", n, kind), "v", old)  # type: ignore[arg-type]
        restore_vertex(storage, directory, "v", new)
        restored = set()
        for subtask in new:
            backend = subtask.keyed
            assert backend is not None
            for timestamp, key in _drain(backend.timer_queue(QUEUE)):
                assert key_group_of_bytes(key, M) in backend.key_groups, (
                    "a timer lands on the owner of its key"
                )
                restored.add((key, timestamp))
        assert restored == {(serialize_key(k), t) for k, t in timers}
    finally:
        for subtask in old + new:
            assert subtask.keyed is not None
            subtask.keyed.close()
