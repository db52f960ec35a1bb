"""User functions. A job's `KeyedProcessFunction` subclasses these.

class CountWords(KeyedProcessFunction):
    def open(self, ctx):                     # ctx: RuntimeContext
        self.count = ctx.state(ValueStateDescriptor("count", default=0))

    def process(self, value, ctx):           # ctx: Context
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class RuntimeContext(Protocol):
    """What a function sees when it opens: its subtask and its state."""

    @property
    def subtask_index(self) -> int: ...

    @property
    def parallelism(self) -> int: ...

    def state(self, descriptor: Any) -> Any:
        """The keyed state for `descriptor` (a ValueStateDescriptor, ...)."""
        ...


class Context(Protocol):
    """What a function sees for each record."""

    @property
    def current_key(self) -> Any: ...


class KeyedProcessFunction:
    """Processes the records of a keyed stream one at a time, with keyed state."""

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record; declare state here."""

    def process(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one record; yield (or return an iterable of) output records."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement process(value, ctx)")

    def close(self) -> None:
        """Called once when the subtask ends."""
