"""What every keyed state backend shares: the current key, key-group ownership,
state registration and the metadata of restored states."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lockgate.runtime.clock import Clock, SystemClock
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM, key_group_of_bytes
from lockgate.runtime.state.codecs import codec_for
from lockgate.runtime.state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from lockgate.runtime.state.keyed import AggregatingState, ListState, MapState, ReducingState, ValueState
from lockgate.runtime.state.tables import CurrentKey, FrozenTable
from lockgate.runtime.state.timers import TimerQueue
from lockgate.runtime.state.ttl_cleanup import IncrementalCleanup

KeyedState = ValueState | ListState | MapState | ReducingState | AggregatingState


class KeyGroupOwnershipError(RuntimeError):
    """A key reached a subtask that does not own its key group (a routing bug)."""


class StateMigrationError(ValueError):
    """A state was registered with a layout that differs from its restored one."""


@dataclass(frozen=True)
class StateMeta:
    """What a snapshot records of a state so it can be restored before registration."""

    kind: StateKind
    ttl: bool

    @staticmethod
    def of(descriptor: StateDescriptor) -> StateMeta:
        return StateMeta(descriptor.kind, descriptor.ttl_ms is not None)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "ttl": self.ttl}

    @staticmethod
    def from_json(data: dict[str, Any]) -> StateMeta:
        return StateMeta(StateKind(data["kind"]), bool(data["ttl"]))


TIMERS_META = StateMeta(StateKind.TIMERS, ttl=False)


class KeyedStateBackend(ABC):
    """Keyed state of one subtask: the key groups it owns and the states in them."""

    kind: str

    def __init__(self, max_parallelism: int, key_groups: range, clock: Clock | None) -> None:
        if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise ValueError(
                f"max_parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}"
            )
        if key_groups.step != 1 or len(key_groups) == 0:
            raise ValueError(f"key groups must be a non-empty contiguous range, got {key_groups}")
        if key_groups.start < 0 or key_groups.stop > max_parallelism:
            raise ValueError(
                f"key groups {key_groups.start}..{key_groups.stop - 1} are outside "
                f"0..{max_parallelism - 1} (max_parallelism={max_parallelism})"
            )
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.clock: Clock = clock or SystemClock()
        self.current = CurrentKey()
        self._states: dict[str, tuple[StateDescriptor, KeyedState]] = {}
        self._timer_queues: dict[str, TimerQueue] = {}
        self.metas: dict[str, StateMeta] = {}
        self._ttl_cleanup = IncrementalCleanup()  # backends add a sweep per TTL state

    # -- the current key ----------------------------------------------------------

    def set_current_key(self, key: Any) -> None:
        key_bytes = serialize_key(key)
        group = key_group_of_bytes(key_bytes, self.max_parallelism)
        if group not in self.key_groups:
            raise self.ownership_error(key, group)
        self.current.set(key, key_bytes, group)

    def ownership_error(self, key: Any, group: int) -> KeyGroupOwnershipError:
        return KeyGroupOwnershipError(
            f"key {key!r} is in key group {group}, which this subtask does not own "
            f"(it owns {self.key_groups.start}..{self.key_groups.stop - 1} of "
            f"{self.max_parallelism})"
        )

    # -- registration -------------------------------------------------------------

    def state(self, descriptor: StateDescriptor) -> Any:
        """The state object for `descriptor`, created on first use."""
        meta = StateMeta.of(descriptor)
        registered = self._states.get(descriptor.name)
        if registered is not None:
            previous, state = registered
            if StateMeta.of(previous) != meta:
                raise StateMigrationError(
                    f"state {descriptor.name!r} is already registered as "
                    f"{previous.kind.value} (ttl={previous.ttl!r}); it cannot be "
                    f"registered again as {descriptor.kind.value} (ttl={descriptor.ttl!r})"
                )
            return state
        restored = self.metas.get(descriptor.name)
        if restored is not None and restored != meta:
            raise StateMigrationError(
                f"state {descriptor.name!r} was restored as {restored.kind.value} "
                f"(ttl {'on' if restored.ttl else 'off'}) but is now declared as "
                f"{meta.kind.value} (ttl {'on' if meta.ttl else 'off'}); changing the kind "
                "or switching TTL on or off needs a new state name"
            )
        self.metas[descriptor.name] = meta
        state = self._make_state(descriptor)
        self._states[descriptor.name] = (descriptor, state)
        return state

    def _make_state(self, descriptor: StateDescriptor) -> KeyedState:
        if descriptor.kind is StateKind.MAP:
            return MapState(descriptor, self._map_table(descriptor), self.current, self.clock)
        table = self._value_table(descriptor)
        if isinstance(descriptor, ReducingStateDescriptor):
            return ReducingState(descriptor, table, self.current, self.clock)
        if isinstance(descriptor, AggregatingStateDescriptor):
            return AggregatingState(descriptor, table, self.current, self.clock)
        if isinstance(descriptor, ValueStateDescriptor):
            return ValueState(descriptor, table, self.current, self.clock)
        return ListState(descriptor, table, self.current, self.clock)

    def timer_queue(self, name: str) -> TimerQueue:
        """The timer queue `name` (an operator's timers of one time domain), created
        on first use; restored timers are in it."""
        queue = self._timer_queues.get(name)
        if queue is not None:
            return queue
        known = self.metas.get(name)
        if name in self._states or (known is not None and known != TIMERS_META):
            kind = known.kind.value if known is not None else "keyed"
            raise StateMigrationError(f"{name!r} is a {kind} state; a timer queue needs a name of its own")
        self.metas[name] = TIMERS_META
        queue = self._timer_queues[name] = self._make_timer_queue(name)
        return queue

    @abstractmethod
    def _make_timer_queue(self, name: str) -> TimerQueue: ...

    @abstractmethod
    def _value_table(self, descriptor: StateDescriptor) -> Any: ...

    @abstractmethod
    def _map_table(self, descriptor: StateDescriptor) -> Any: ...

    # -- snapshot and restore (byte level, see state.tables) -----------------------

    @abstractmethod
    def freeze(self) -> dict[str, FrozenTable]:
        """The synchronous part of a snapshot: every state as of now."""

    @abstractmethod
    def load(
        self, state: str, meta: StateMeta, key_group: int, entries: Iterable[tuple[bytes, bytes]]
    ) -> None:
        """Add restored entries of one key group of one state."""

    def _accept_restored(self, state: str, meta: StateMeta, key_group: int) -> None:
        if key_group not in self.key_groups:
            raise KeyGroupOwnershipError(
                f"restore offered key group {key_group} of state {state!r}, outside this "
                f"subtask's {self.key_groups.start}..{self.key_groups.stop - 1}"
            )
        self.add_restored_meta(state, meta)

    def add_restored_meta(self, state: str, meta: StateMeta) -> None:
        """Record a restored state's layout; it must agree with what is known of it."""
        known = self.metas.setdefault(state, meta)
        if known != meta:
            raise StateMigrationError(
                f"state {state!r} is {known.kind.value} here but the snapshot holds it as "
                f"{meta.kind.value} (ttl {'on' if meta.ttl else 'off'})"
            )

    def compactors(self) -> dict[str, Callable[[bytes, int], bytes | None]]:
        """Per registered TTL state, what drops its expired entries from snapshot bytes."""
        return {
            name: codec_for(descriptor).compact
            for name, (descriptor, _) in self._states.items()
            if descriptor.ttl_ms is not None
        }

    def drop_expired(self, budget: int | None = None) -> int:
        """Examine up to `budget` stored entries of the registered TTL states
        (None: a budget that adapts to the backlog), continuing where the last
        call stopped, and delete the expired ones (see state.ttl_cleanup).
        Returns how many were deleted."""
        return self._ttl_cleanup.run(budget, self.clock.now_ms())

    @abstractmethod
    def close(self) -> None: ...
