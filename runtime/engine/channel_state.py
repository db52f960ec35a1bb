"""Channel state: the records a subtask's input channels held, not yet read, when
it took an unaligned checkpoint (`alignment.py`).

A file per subtask, written with the subtask's snapshot and named in `_metadata`
with its size and checksums like every state file. Its records are grouped by
key group, each with its event time (None if it has none), so that a restore at
any parallelism hands each new subtask exactly the records of the key groups it
owns: every channel between subtasks is a keyed exchange (forward edges are
chained in one thread), so every record in flight has a key group. Within a key
group the records keep the order in which their channels held them.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lockgate.runtime.engine.events import Element, TimestampedBatch
from lockgate.runtime.snapshot.handles import ChannelStateHandle
from lockgate.runtime.snapshot.metadata import VertexState
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

FORMAT = "lockgate-channel-state/1"

KeyGroupOf = Callable[[Any], int]
"""The key group of a record as the exchange into the vertex sent it."""

Groups = dict[int, list[tuple[Any, int | None]]]


def group_frames(frames: Iterable[bytes], key_group_of: KeyGroupOf) -> Groups:
    """The records of pickled channel elements by key group, with their event times;
    watermarks and other signals in between are left out (a restore starts event
    time afresh, and replayed records are not late against it)."""
    groups: Groups = {}
    for frame in frames:
        element = pickle.loads(frame)
        if isinstance(element, TimestampedBatch):
            pairs: Iterable[tuple[Any, int | None]] = zip(element.records, element.timestamps, strict=True)
        elif isinstance(element, list):
            pairs = ((record, None) for record in element)
        else:
            continue
        for record, stamp in pairs:
            groups.setdefault(key_group_of(record), []).append((record, stamp))
    return groups


def encode(groups: Groups) -> bytes:
    return pickle.dumps({"format": FORMAT, "groups": groups}, pickle.HIGHEST_PROTOCOL)


def decode(data: bytes, path: str) -> Groups:
    content = pickle.loads(data)
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise SnapshotCorruptError(path, f"is not channel state this Lockgate writes ({FORMAT})")
    groups: Groups = content["groups"]
    return groups


def write_channel_state(
    storage: CheckpointStorage, path: str, snapshot_dir: str, groups: Groups
) -> ChannelStateHandle:
    records = sum(len(pairs) for pairs in groups.values())
    return ChannelStateHandle(storage.write_file(path, encode(groups), snapshot_dir), records)


def read_channel_state(storage: CheckpointStorage, snapshot_dir: str, state: VertexState) -> Groups:
    """Every subtask's channel state of a vertex, merged: old subtasks own disjoint
    key groups, so no key group comes from two files."""
    merged: Groups = {}
    for subtask in sorted(state.subtasks, key=lambda s: s.subtask):
        if subtask.channel is not None:
            data = storage.read_file(snapshot_dir, subtask.channel.file)
            for group, pairs in decode(data, subtask.channel.file.path).items():
                merged.setdefault(group, []).extend(pairs)
    return merged


def replay(groups: Groups, key_groups: range, batch_size: int) -> list[Element]:
    """The records of `key_groups`, as batches a gate replays before any new input."""
    pairs = [pair for group in sorted(groups) if group in key_groups for pair in groups[group]]
    batches: list[Element] = []
    for start in range(0, len(pairs), batch_size):
        chunk: Sequence[tuple[Any, int | None]] = pairs[start : start + batch_size]
        records = [record for record, _ in chunk]
        stamps = [stamp for _, stamp in chunk]
        batches.append(records if all(s is None for s in stamps) else TimestampedBatch(records, stamps))
    return batches
