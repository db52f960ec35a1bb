"""State descriptors: the name, kind and options of a piece of keyed state."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from lockgate.runtime.serializers import DEFAULT_SERIALIZER, Serializer

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


class StateKind(enum.Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"
    TIMERS = "timers"  # an operator's timers of one time domain (state.timers)


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Folds inputs into an accumulator, as Flink's AggregateFunction."""

    @abstractmethod
    def create_accumulator(self) -> ACC:
        """A new, empty accumulator: the start of a key's (or a window's) aggregate."""

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC:
        """The accumulator with `value` folded in; return it (a new one, or the one given,
        changed)."""

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT:
        """What `get()` returns, or a window emits, for this accumulator."""

    def merge(self, a: ACC, b: ACC) -> ACC:
        """Combine two accumulators (session windows merge): implement it to use one."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement merge(a, b)")


def _ttl_ms(ttl: float | timedelta | None, name: str) -> int | None:
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if seconds <= 0:
        raise ValueError(f"state {name!r}: ttl must be positive, got {ttl!r}")
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class StateDescriptor:
    """Common fields. `ttl` is processing time since the entry was last written."""

    name: str
    ttl: float | timedelta | None = field(default=None, kw_only=True)
    serializer: Serializer = field(default=DEFAULT_SERIALIZER, kw_only=True, compare=False)

    kind: ClassVar[StateKind] = StateKind.VALUE

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a state name must be a non-empty string, got {self.name!r}")
        _ttl_ms(self.ttl, self.name)

    @property
    def ttl_ms(self) -> int | None:
        """The time to live in milliseconds, or None when entries never expire."""
        return _ttl_ms(self.ttl, self.name)


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    """A ValueState: one value per key; `value()` returns `default` while the key has none."""

    default: Any = None


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    """TTL applies to each element separately."""

    kind: ClassVar[StateKind] = StateKind.LIST


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    """Map keys use the stable key serializer; TTL applies to each entry separately."""

    kind: ClassVar[StateKind] = StateKind.MAP


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor):
    """A ReducingState: one value per key, folded with `reduce_fn(a, b)` (associative) as
    values are added."""

    reduce_fn: Callable[[Any, Any], Any]

    kind: ClassVar[StateKind] = StateKind.REDUCING

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.reduce_fn):
            raise TypeError(
                f"ReducingStateDescriptor {self.name!r}: reduce_fn must be a callable "
                f"(a, b) -> c, got {self.reduce_fn!r}"
            )


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor):
    """An AggregatingState: one accumulator of `agg_fn` (an AggregateFunction) per key."""

    agg_fn: AggregateFunction[Any, Any, Any]

    kind: ClassVar[StateKind] = StateKind.AGGREGATING

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.agg_fn, AggregateFunction):
            raise TypeError(
                f"AggregatingStateDescriptor {self.name!r}: agg_fn must be an "
                f"AggregateFunction instance, got {self.agg_fn!r}"
            )
