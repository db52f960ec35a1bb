"""A savepoint or retained checkpoint opened by path: its operators, their states,
and one keyed state's rows.

It is opened as a restore opens it: `_metadata` must carry the job's signature
(`runtime/snapshot/metadata.py`) unless the caller says it trusts whoever could
write the snapshot (`unsigned=True`), because reading its state unpickles it.
Every file read afterwards is checked against what the signed metadata records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockgate.runtime.engine.window_operator import ELEMENTS
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes, key_group_range
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, VertexState, read_metadata
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage
from lockgate.runtime.state.backend import StateMeta
from lockgate.runtime.state.operator_state import OperatorStateSnapshot
from lockgate.state.errors import StateAccessError
from lockgate.state.raw import raw_records, state_metas
from lockgate.state.rows import ReadOptions, Row, as_dicts, columns, decode

if TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class SubtaskInfo:
    index: int
    key_groups: range | None  # None: no keyed state
    format: str | None  # "canonical" or "native"


@dataclass(frozen=True)
class OperatorStateInfo:
    mode: str  # "split", "union" or "broadcast"
    elements: int  # over every subtask (a broadcast state's: subtask 0's entries)


@dataclass(frozen=True)
class OperatorInfo:
    """What a snapshot holds of one vertex."""

    name: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskInfo, ...]
    states: dict[str, StateMeta] = field(default_factory=dict)
    operator_state: dict[str, OperatorStateInfo] = field(default_factory=dict)


@dataclass(frozen=True)
class StateRef:
    """Everything a reader of one state needs, small and picklable: what a Spark task
    gets to read its key groups (the metadata was verified where it was opened)."""

    url: str
    metadata: CheckpointMetadata
    operator: str
    state: str
    meta: StateMeta
    elements_meta: StateMeta | None  # a window vertex's elements, read with its windows
    options: ReadOptions

    @property
    def vertex(self) -> VertexState:
        return self.metadata.vertices[self.operator]

    @property
    def columns(self) -> tuple[str, ...]:
        return columns(self.state, self.meta, self.options)

    def rows(self, key_groups: range | None = None) -> Iterator[Row]:
        """The rows of `key_groups` (default: all), key group by key group."""
        storage = CheckpointStorage(self.url)
        vertex = self.vertex
        groups = range(vertex.max_parallelism) if key_groups is None else key_groups

        def read(state: str) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
            return raw_records(storage, storage.root, vertex, state, groups)

        return decode(self.state, self.meta, self.options, read, self.elements_meta)

    def ranges(self, partitions: int | None = None) -> list[range]:
        """Key-group ranges to read in parallel: by default the snapshot's own
        subtasks' (each file read by one reader), else `partitions` even ranges."""
        vertex = self.vertex
        if partitions is None:
            found = sorted(
                {s.keyed.key_groups for s in vertex.subtasks if s.keyed is not None}, key=lambda r: r.start
            )
            return found or [range(vertex.max_parallelism)]
        count = min(partitions, vertex.max_parallelism)
        return [key_group_range(vertex.max_parallelism, count, index) for index in range(count)]


class SavedState:
    """A snapshot opened for reading; `open_snapshot` opens one."""

    def __init__(self, url: str, metadata: CheckpointMetadata) -> None:
        self.url = url
        self.metadata = metadata
        self._storage = CheckpointStorage(url)
        self._operators: dict[str, OperatorInfo] = {}  # each read once (its files' indexes)

    @property
    def operators(self) -> dict[str, OperatorInfo]:
        return {name: self.operator(name) for name in sorted(self.metadata.vertices)}

    def operator(self, name: str) -> OperatorInfo:
        """What the snapshot holds of vertex `name`."""
        known = self._operators.get(name)
        if known is None:
            known = self._operators[name] = self._read_operator(name)
        return known

    def _read_operator(self, name: str) -> OperatorInfo:
        vertex = self._vertex(name)
        subtasks = tuple(
            SubtaskInfo(
                s.subtask,
                None if s.keyed is None else s.keyed.key_groups,
                None if s.keyed is None else s.keyed.format,
            )
            for s in sorted(vertex.subtasks, key=lambda s: s.subtask)
        )
        metas = state_metas(self._storage, self._storage.root, vertex)
        return OperatorInfo(
            name,
            vertex.parallelism,
            vertex.max_parallelism,
            subtasks,
            dict(sorted(metas.items())),
            self._operator_state(vertex),
        )

    def _operator_state(self, vertex: VertexState) -> dict[str, OperatorStateInfo]:
        found: dict[str, OperatorStateInfo] = {}
        for subtask in sorted(vertex.subtasks, key=lambda s: s.subtask):
            if subtask.operator is None:
                continue
            data = self._storage.read_file(self._storage.root, subtask.operator.file)
            for name, (mode, items) in OperatorStateSnapshot.decode(data).states.items():
                count = len(items) // 2 if mode == "broadcast" else len(items)
                known = found.get(name)
                if known is None:
                    found[name] = OperatorStateInfo(mode, count)
                elif mode != "broadcast":
                    found[name] = OperatorStateInfo(mode, known.elements + count)
        return found

    def _vertex(self, name: str) -> VertexState:
        vertex = self.metadata.vertices.get(name)
        if vertex is None:
            known = ", ".join(sorted(self.metadata.vertices)) or "none"
            raise StateAccessError(f"{self.url} holds no operator {name!r} (it holds: {known})")
        return vertex

    def state(self, operator: str, state: str, options: ReadOptions | None = None) -> StateRef:
        """One keyed state of `operator`, to read (`rows`, `to_pandas`, `lockgate.state.spark`)."""
        info = self.operator(operator)
        meta = info.states.get(state)
        if meta is None:
            known = ", ".join(info.states) or "no keyed state"
            raise StateAccessError(
                f"operator {operator!r} of {self.url} has no state {state!r} (it has: {known})"
            )
        elements = info.states.get(ELEMENTS.name)
        return StateRef(self.url, self.metadata, operator, state, meta, elements, options or ReadOptions())

    def rows(
        self, operator: str, state: str, options: ReadOptions | None = None, key: Any = None
    ) -> Iterator[dict[str, Any]]:
        """The rows of a state, as dicts by column (see `lockgate.state.rows`); with
        `key`, only that key's (read from its key group alone)."""
        ref = self.state(operator, state, options)
        if key is None:
            return as_dicts(ref.columns, ref.rows())
        # Types are part of a key (1, 1.0 and True are three): compared serialized.
        wanted = serialize_key(key)
        group = key_group_of_bytes(wanted, ref.vertex.max_parallelism)
        rows = as_dicts(ref.columns, ref.rows(range(group, group + 1)))
        return (row for row in rows if serialize_key(row["key"]) == wanted)

    def to_pandas(self, operator: str, state: str, options: ReadOptions | None = None) -> pandas.DataFrame:
        """The rows of a state as a pandas DataFrame (pandas: `pip install 'lockgate[state]'`)."""
        try:
            import pandas  # noqa: PLC0415 - an optional dependency
        except ImportError:
            raise StateAccessError("to_pandas needs pandas: pip install 'lockgate[state]'") from None
        ref = self.state(operator, state, options)
        return pandas.DataFrame.from_records(list(ref.rows()), columns=list(ref.columns))


def open_snapshot(url: str, key: SnapshotKey | None = None, *, unsigned: bool = False) -> SavedState:
    """The savepoint or retained checkpoint at `url` (a directory holding `_metadata`),
    if `key` (the job's snapshot key) signed it; `unsigned=True` reads it whoever
    wrote it — only for a snapshot you trust, as its state is unpickled."""
    if key is None and not unsigned:
        raise StateAccessError(
            f"{url}: give the job's snapshot key (--snapshot-key-file, or --job-id for a job run "
            "here) to check who wrote it, or read it unsigned (--unsigned) if you trust whoever could"
        )
    storage = snapshot_storage(url)
    metadata = read_metadata(storage, storage.root, key, trust_unsigned=unsigned)
    return SavedState(url, metadata)


def snapshot_storage(url: str) -> CheckpointStorage:
    """The storage of the snapshot at `url`, refused unless it holds a `_metadata`."""
    storage = CheckpointStorage(url)
    if not storage.exists(f"{storage.root}/{METADATA}"):
        raise StateAccessError(
            f"{url} is no savepoint or checkpoint: it holds no {METADATA} (give the directory of "
            "one, savepoint-<id>/ or <job>/chk-<n>/, as `lockgate checkpoints list` shows it)"
        )
    return storage
