"""New savepoints, in the canonical format a job writes, signed with the job's
key: bootstrapped from records (a function sets each key's state, as Flink's
KeyedStateBootstrapFunction), or made from an existing snapshot with one
operator's state transformed key by key, operators removed or added, the max
parallelism changed.

Each keyed operator is written subtask by subtask: its state is loaded into a
heap backend owning the subtask's key groups — the backend and state objects a
job's functions use — the per-key function runs with each key current, and the
backend's savepoint strategy writes the subtask's file. Operator state (sources'
offsets, sinks' transactions) is copied as it is. `_metadata` comes last, as a
job writes it.
"""

from __future__ import annotations

import itertools
import posixpath
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.clock import Clock
from lockgate.runtime.engine.timer_service import OperatorTimers
from lockgate.runtime.key_serializer import deserialize_key, serialize_key
from lockgate.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM, key_group_of_bytes, key_group_range
from lockgate.runtime.snapshot.handles import OperatorStateHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SubtaskState, VertexState, write_metadata
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, snapshot_subtask
from lockgate.runtime.state.backend import StateMeta
from lockgate.runtime.state.descriptors import StateKind
from lockgate.runtime.state.tables import split_map_rest
from lockgate.runtime.state.timers import split_timer_rest
from lockgate.state.errors import StateAccessError
from lockgate.state.raw import raw_records, state_metas
from lockgate.state.saved import SavedState


class KeyContext:
    """What a per-key function gets: the current key, the key's state as a job's
    function sees it (`state(descriptor)`), and its timers."""

    def __init__(self, backend: HeapKeyedStateBackend, operator: str) -> None:
        self._backend = backend
        self.timers = OperatorTimers(operator, backend)

    @property
    def current_key(self) -> Any:
        return self._backend.current.key

    def state(self, descriptor: Any) -> Any:
        return self._backend.state(descriptor)


KeyFunction = Callable[[Any, KeyContext], None]
"""`fn(key, ctx)`: sets (or changes) the state of `key` through `ctx.state(...)`."""
BootstrapFunction = Callable[[Any, list[Any], KeyContext], None]
"""`fn(key, records, ctx)`: sets the state of `key` from its records."""


def key_bytes_of(kind: StateKind, rest: bytes) -> bytes:
    """The serialized key of a stored record's `rest` (`runtime/state/tables.py`)."""
    if kind is StateKind.MAP:
        return split_map_rest(rest)[0]
    if kind is StateKind.TIMERS:
        return split_timer_rest(rest)[1]
    return rest


@dataclass(frozen=True)
class SubtaskPlan:
    """One keyed subtask to write: its key groups of `max_parallelism`, and where."""

    operator: str
    index: int
    parallelism: int
    max_parallelism: int
    url: str

    @property
    def key_groups(self) -> range:
        return key_group_range(self.max_parallelism, self.parallelism, self.index)


def write_keyed_subtask(
    plan: SubtaskPlan,
    load: Callable[[HeapKeyedStateBackend], Iterable[bytes]],
    fn: Callable[[Any, KeyContext], None] | None,
    clock: Clock | None = None,
) -> SubtaskState:
    """Write one subtask's keyed state: `load` fills the backend and gives the
    serialized keys it holds; `fn` then runs once per key, with the key current."""
    backend = HeapKeyedStateBackend(plan.max_parallelism, plan.key_groups, clock)
    try:
        keys = load(backend)
        if fn is not None:
            context = KeyContext(backend, plan.operator)
            for key_bytes in keys:
                key = deserialize_key(key_bytes)
                backend.set_current_key(key)
                fn(key, context)
        storage = CheckpointStorage(plan.url)
        target = SnapshotTarget(storage, storage.root, plan.operator, plan.index)
        return snapshot_subtask(target, 0, "savepoint", backend, None).complete()
    finally:
        backend.close()


def bootstrap_records(
    records: Iterable[tuple[bytes, Any]], fn: BootstrapFunction, operator: str
) -> Callable[[HeapKeyedStateBackend], Iterable[bytes]]:
    """A `load` for `write_keyed_subtask` from (serialized key, record) pairs sorted by
    key, read once as they come: `fn` gets each key's records."""

    def load(backend: HeapKeyedStateBackend) -> Iterable[bytes]:
        context = KeyContext(backend, operator)
        for key_bytes, grouped in itertools.groupby(records, key=lambda pair: pair[0]):
            key = deserialize_key(key_bytes)
            backend.set_current_key(key)
            fn(key, [record for _, record in grouped], context)
        return ()

    return load


@dataclass(frozen=True)
class _Existing:
    """An operator of the base snapshot, rewritten (its state through `fn`, if given)."""

    fn: KeyFunction | None = None
    parallelism: int | None = None
    dropped: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Bootstrapped:
    records: Iterable[Any]
    key_fn: Callable[[Any], Any]
    fn: BootstrapFunction
    parallelism: int


Writes = Callable[[str, str, int], VertexState]
"""A vertex written elsewhere (`lockgate.state.spark`): `(url, operator, max parallelism)`."""


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise StateAccessError(
            f"max_parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}"
        )


class SavepointWriter:
    """A savepoint to write: `SavepointWriter.new(max_parallelism)` or
    `SavepointWriter.from_snapshot(saved)`, then what changes, then `write(url, key)`."""

    def __init__(self, max_parallelism: int, base: SavedState | None, job_id: str) -> None:
        self._max_parallelism = max_parallelism
        self._base = base
        self._job_id = job_id
        self._plans: dict[str, _Existing | _Bootstrapped | Writes] = {}
        if base is not None:
            self._plans = {name: _Existing() for name in base.metadata.vertices}

    @staticmethod
    def new(max_parallelism: int = 128, job_id: str = "bootstrapped") -> SavepointWriter:
        """An empty savepoint: operators are added with `bootstrap`."""
        _check_max_parallelism(max_parallelism)
        return SavepointWriter(max_parallelism, None, job_id)

    @staticmethod
    def from_snapshot(saved: SavedState) -> SavepointWriter:
        """Everything `saved` holds, rewritten as a savepoint unless changed."""
        vertices = saved.metadata.vertices.values()
        in_flight = sum(s.channel.records for v in vertices for s in v.subtasks if s.channel is not None)
        if in_flight:
            raise StateAccessError(
                f"{saved.url} was taken unaligned: {in_flight} records were in flight between operators "
                "(its channel state), which a savepoint never carries; write from a savepoint of the job "
                "(savepoints are always aligned) or from a checkpoint without channel state"
            )
        max_parallelism = next((v.max_parallelism for v in vertices), 128)
        return SavepointWriter(max_parallelism, saved, saved.metadata.job_id)

    def with_max_parallelism(self, max_parallelism: int) -> SavepointWriter:
        """Every keyed state split anew into `max_parallelism` key groups."""
        _check_max_parallelism(max_parallelism)
        self._max_parallelism = max_parallelism
        return self

    def remove_operator(self, operator: str) -> SavepointWriter:
        if self._plans.pop(operator, None) is None:
            raise StateAccessError(f"the savepoint has no operator {operator!r} to remove ({self._known()})")
        return self

    def transform(
        self,
        operator: str,
        fn: KeyFunction | None = None,
        *,
        parallelism: int | None = None,
        drop_states: Iterable[str] = (),
    ) -> SavepointWriter:
        """Run `fn(key, ctx)` for each key of `operator`'s keyed state (change a state's
        values or type, set a new state); `drop_states`: states left out; `parallelism`:
        how many subtask files it is written as (any: a restore redistributes them)."""
        plan = self._plans.get(operator)
        if not isinstance(plan, _Existing):
            raise StateAccessError(
                f"the savepoint has no operator {operator!r} to transform ({self._known()})"
            )
        self._plans[operator] = _Existing(fn, parallelism, frozenset(drop_states))
        return self

    def bootstrap(
        self,
        operator: str,
        records: Iterable[Any],
        key_fn: Callable[[Any], Any],
        fn: BootstrapFunction,
        *,
        parallelism: int = 1,
    ) -> SavepointWriter:
        """A keyed operator whose state `fn(key, records_of_key, ctx)` sets from `records`."""
        self._check_new(operator)
        self._plans[operator] = _Bootstrapped(records, key_fn, fn, parallelism)
        return self

    def add_written(self, operator: str, writes: Writes) -> SavepointWriter:
        """A keyed operator whose subtask files `writes` puts in place (Spark's bootstrap)."""
        self._check_new(operator)
        self._plans[operator] = writes
        return self

    def _check_new(self, operator: str) -> None:
        if operator in self._plans:
            raise StateAccessError(
                f"the savepoint holds operator {operator!r} already: transform it, or remove it first"
            )

    def _known(self) -> str:
        return f"it has: {', '.join(sorted(self._plans)) or 'none'}"

    @property
    def max_parallelism(self) -> int:
        return self._max_parallelism

    def write(self, url: str, key: SnapshotKey, clock: Clock | None = None) -> CheckpointMetadata:
        """Write the savepoint into the directory `url` (empty or new), signed with `key`."""
        storage = CheckpointStorage(url)
        if storage.exists(posixpath.join(storage.root, METADATA)):
            raise StateAccessError(f"{url} holds a snapshot already: write the new savepoint elsewhere")
        self._check_parallelisms()
        key.persist()
        vertices = {name: self._write_vertex(url, name, plan, clock) for name, plan in self._plans.items()}
        metadata = CheckpointMetadata(self._job_id, 0, "savepoint", int(time.time() * 1000), vertices)
        write_metadata(storage, storage.root, metadata, key)
        return metadata

    def _check_parallelisms(self) -> None:
        """Before anything is written: each operator's subtasks need a key group each."""
        for name, plan in self._plans.items():
            parallelism = plan.parallelism if isinstance(plan, _Existing | _Bootstrapped) else None
            if parallelism is not None and not 1 <= parallelism <= self._max_parallelism:
                raise StateAccessError(
                    f"operator {name!r}: parallelism {parallelism} must be between 1 and the max "
                    f"parallelism {self._max_parallelism} (a subtask needs at least one key group)"
                )

    def _write_vertex(
        self, url: str, name: str, plan: _Existing | _Bootstrapped | Writes, clock: Clock | None
    ) -> VertexState:
        if isinstance(plan, _Bootstrapped):
            return self._bootstrap(url, name, plan, clock)
        if isinstance(plan, _Existing):
            return self._rewrite(url, name, plan, clock)
        return plan(url, name, self._max_parallelism)

    def _bootstrap(self, url: str, name: str, plan: _Bootstrapped, clock: Clock | None) -> VertexState:
        m, p = self._max_parallelism, plan.parallelism
        keyed = sorted(((serialize_key(plan.key_fn(r)), r) for r in plan.records), key=lambda pair: pair[0])
        by_subtask: dict[int, list[tuple[bytes, Any]]] = {}
        for key_bytes, record in keyed:
            subtask = key_group_of_bytes(key_bytes, m) * p // m
            by_subtask.setdefault(subtask, []).append((key_bytes, record))
        subtasks = tuple(
            write_keyed_subtask(
                SubtaskPlan(name, i, p, m, url),
                bootstrap_records(by_subtask.get(i, []), plan.fn, name),
                None,
                clock,
            )
            for i in range(p)
        )
        return VertexState(p, m, subtasks)

    def _rewrite(self, url: str, name: str, plan: _Existing, clock: Clock | None) -> VertexState:
        assert self._base is not None
        old = self._base.metadata.vertices[name]
        keyed = any(s.keyed is not None for s in old.subtasks)
        if not keyed:
            return replace(
                old, max_parallelism=self._max_parallelism, subtasks=self._copy_operator_state(url, name, old)
            )
        p = plan.parallelism or old.parallelism
        subtasks = tuple(
            write_keyed_subtask(
                SubtaskPlan(name, i, p, self._max_parallelism, url), self._loader(old, plan), plan.fn, clock
            )
            for i in range(p)
        )
        return VertexState(p, self._max_parallelism, subtasks)

    def _copy_operator_state(self, url: str, name: str, old: VertexState) -> tuple[SubtaskState, ...]:
        assert self._base is not None
        source = CheckpointStorage(self._base.url)
        target = CheckpointStorage(url)
        copied = []
        for subtask in old.subtasks:
            handle = None
            if subtask.operator is not None:
                data = source.read_file(source.root, subtask.operator.file)
                path = posixpath.join(target.root, name, str(subtask.subtask), "operator")
                handle = OperatorStateHandle(target.write_file(path, data, target.root))
            copied.append(SubtaskState(subtask.subtask, None, handle))
        return tuple(copied)

    def _loader(
        self, old: VertexState, plan: _Existing
    ) -> Callable[[HeapKeyedStateBackend], Iterable[bytes]]:
        assert self._base is not None
        storage = CheckpointStorage(self._base.url)
        metas = {n: m for n, m in state_metas(storage, storage.root, old).items() if n not in plan.dropped}

        def load(backend: HeapKeyedStateBackend) -> Iterable[bytes]:
            keys: dict[bytes, None] = {}
            for name, meta in metas.items():
                for group, records in self._records_for(storage, old, name, meta, backend.key_groups):
                    backend.load(name, meta, group, records)
                    if meta.kind is not StateKind.TIMERS:
                        keys.update((key_bytes_of(meta.kind, rest), None) for rest, _ in records)
            return list(keys)

        return load

    def _records_for(
        self, storage: CheckpointStorage, old: VertexState, state: str, meta: StateMeta, key_groups: range
    ) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
        """`state`'s records in `key_groups` of the new max parallelism: the same key
        groups when it is unchanged, else every record, each key hashed anew."""
        if old.max_parallelism == self._max_parallelism:
            yield from raw_records(storage, storage.root, old, state, key_groups)
            return
        regrouped: dict[int, list[tuple[bytes, bytes]]] = {}
        for _, records in raw_records(storage, storage.root, old, state, range(old.max_parallelism)):
            for rest, data in records:
                group = key_group_of_bytes(key_bytes_of(meta.kind, rest), self._max_parallelism)
                if group in key_groups:
                    regrouped.setdefault(group, []).append((rest, data))
        yield from sorted(regrouped.items())
