"""The channel state file: what a subtask's channels held when it took a checkpoint
unaligned, written by key group, read back exactly, and handed at any parallelism
to the subtask that owns each record's key group."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from lockgate.runtime import CollectSink, GeneratorSource, StreamEnvironment
from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.engine.channel_state import (
    group_frames,
    read_channel_state,
    replay,
    write_channel_state,
)
from lockgate.runtime.engine.events import (
    Barrier,
    EndOfStream,
    Idle,
    TimestampedBatch,
    Watermark,
    keyed_record,
)
from lockgate.runtime.engine.task import Wiring
from lockgate.runtime.keygroups import key_group_range
from lockgate.runtime.snapshot.metadata import SubtaskState, VertexState
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

from tests.jobs.functions import RunningSum

MAX_PARALLELISM = 16


def _frames(*elements: object) -> list[bytes]:
    return [pickle.dumps(e, pickle.HIGHEST_PROTOCOL) for e in elements]


def _written(tmp_path: Path, subtask_frames: list[list[bytes]]) -> tuple[CheckpointStorage, VertexState]:
    storage = CheckpointStorage(f"file://{tmp_path}/chk-1")
    subtasks = []
    for index, frames in enumerate(subtask_frames):
        groups = group_frames(frames, lambda record: int(record[2]))
        path = f"{storage.root}/sum/{index}/channel"
        subtasks.append(SubtaskState(index, channel=write_channel_state(storage, path, storage.root, groups)))
    return storage, VertexState(len(subtasks), MAX_PARALLELISM, tuple(subtasks))


def test_what_was_in_flight_is_read_back_exactly_and_every_record_goes_to_the_subtask_owning_its_key_group(
    tmp_path: Path,
) -> None:
    records = [keyed_record(f"key-{i}", {"n": i}, MAX_PARALLELISM) for i in range(200)]
    stamped = TimestampedBatch(records[100:], list(range(100, 200)))
    # Two old subtasks; signals among the records are not state.
    storage, state = _written(
        tmp_path,
        [_frames(records[:50], Watermark(5), Idle(), records[50:100]), _frames(stamped, EndOfStream())],
    )
    assert [s.channel.records for s in state.subtasks if s.channel is not None] == [100, 100]
    groups = read_channel_state(storage, storage.root, state)
    for parallelism in (1, 3):  # fewer and more subtasks than wrote it
        replayed = []
        for index in range(parallelism):
            owned = key_group_range(MAX_PARALLELISM, parallelism, index)
            for batch in replay(groups, owned, batch_size=64):
                pairs = (
                    zip(batch.records, batch.timestamps, strict=True)
                    if isinstance(batch, TimestampedBatch)
                    else ((record, None) for record in batch)
                )
                for record, stamp in pairs:
                    assert record[2] in owned, f"key group {record[2]} replayed to subtask {index}"
                    replayed.append((record, stamp))
        expected = [(r, None) for r in records[:100]] + [(r, i + 100) for i, r in enumerate(records[100:])]
        assert sorted(replayed, key=lambda p: p[0][3]["n"]) == expected


def test_a_key_groups_records_keep_their_channels_order(tmp_path: Path) -> None:
    same_group = [keyed_record("k", {"n": i}, MAX_PARALLELISM) for i in range(10)]
    storage, state = _written(tmp_path, [_frames(same_group[:5], same_group[5:])])
    groups = read_channel_state(storage, storage.root, state)
    (batch,) = replay(groups, range(MAX_PARALLELISM), batch_size=64)
    assert batch == same_group


def test_a_damaged_channel_state_file_is_refused_naming_it(tmp_path: Path) -> None:
    storage, state = _written(tmp_path, [_frames([keyed_record("k", 1, MAX_PARALLELISM)])])
    path = tmp_path / "chk-1" / "sum" / "0" / "channel"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="sum/0/channel"):
        read_channel_state(storage, storage.root, state)


def test_a_barrier_is_never_channel_state() -> None:
    barrier = Barrier(Trigger(1, 1, "checkpoint", "file:///chk-1", 0, False))
    assert group_frames(_frames(barrier, EndOfStream()), lambda r: 0) == {}


def test_every_channel_between_subtasks_is_a_keyed_exchange_so_every_record_in_flight_has_a_key_group() -> (
    None
):
    """What a non-keyed channel's channel state would do at another parallelism does
    not arise: a forward edge (a map, filter, flat_map or sink after anything but a
    key_by) is chained into its upstream's thread and has no channel; only a vertex
    right after a key_by heads a chain fed by channels (Wiring.empty makes channels
    for those alone). Of those, only a keyed operator (process, window) takes a
    checkpoint unaligned; a map, filter or sink right after a key_by always aligns
    (test_unaligned_review.py shows such a job stays exact)."""
    env = StreamEnvironment("forward-and-keyed")
    (
        env.source(GeneratorSource(10, keys=3), name="numbers")
        .map(lambda r: r, name="forward-map")
        .filter(lambda r: True, name="forward-filter")
        .key_by(lambda r: r["key"])
        .process(RunningSum(), name="sum")
        .map(lambda r: r, name="after-sum")
        .key_by(lambda r: r["key"])
        .process(RunningSum(), name="again")
        .sink(CollectSink("forward-and-keyed"), name="out")
    )
    graph = env.graph()
    fed_by_channels = [chain[0] for chain in graph.chains() if chain[0].kind != "source"]
    assert [v.name for v in fed_by_channels] == ["sum", "again"]
    assert all(v.keyed for v in fed_by_channels)
    assert set(Wiring.empty(graph).inputs) == {"sum", "again"}
