"""Rows of one keyed state: its stored records decoded the way the state kinds
decode them, one tuple per row, under the columns of its view.

    value, reducing     (key, value)
    aggregating         (key, accumulator)
    list                (key, index, value), one per element; whole lists: (key, values)
    map                 (key, user_key, value)
    timers              (key, timestamp, domain)     `_timers.event_time`, `_timers.processing_time`
    windows             (key, window_start, window_end, value)   `_window.windows`: an aggregate's
                        accumulator, or a process window's elements (a list)
    window elements     (key, window_start, window_end, index, value)   `_window.elements`

A state with a TTL adds `expires_at_ms` (for whole lists, one per element), and
rows that expired by `now_ms` are left out unless asked for, as the job no
longer reads them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from lockgate.runtime.engine.timer_service import QUEUES
from lockgate.runtime.engine.window_operator import ELEMENTS, WINDOWS, element_position, window_of_bounds
from lockgate.runtime.key_serializer import deserialize_key
from lockgate.runtime.serializers import DEFAULT_SERIALIZER, Serializer
from lockgate.runtime.state.backend import StateMeta
from lockgate.runtime.state.codecs import Codec, stored_codec
from lockgate.runtime.state.descriptors import StateKind
from lockgate.runtime.state.tables import split_map_rest
from lockgate.runtime.state.timers import split_timer_rest
from lockgate.state.errors import StateAccessError

Row = tuple[Any, ...]
Records = list[tuple[bytes, bytes]]
DOMAINS = {queue: domain for domain, queue in QUEUES.items()}


@dataclass(frozen=True)
class ReadOptions:
    """How records become rows. `serializer`: the state's (its descriptor's; pickle
    unless the job gave another). `whole_lists`: one row per list, not per element.
    `include_expired`: rows of TTL states that expired by `now_ms` too."""

    serializer: Serializer = DEFAULT_SERIALIZER
    whole_lists: bool = False
    include_expired: bool = False
    now_ms: int | None = None  # None: the time the rows are read

    def expired_by(self) -> int:
        return int(time.time() * 1000) if self.now_ms is None else self.now_ms


def columns(state: str, meta: StateMeta, options: ReadOptions) -> tuple[str, ...]:
    """The columns of `state`'s rows."""
    ttl = ("expires_at_ms",) if meta.ttl else ()
    if state == WINDOWS.name:
        return ("key", "window_start", "window_end", "value")
    if state == ELEMENTS.name:
        return ("key", "window_start", "window_end", "index", "value")
    kind = meta.kind
    if kind is StateKind.TIMERS:
        return ("key", "timestamp", "domain")
    if kind is StateKind.MAP:
        return ("key", "user_key", "value", *ttl)
    if kind is StateKind.LIST:
        return ("key", "values", *ttl) if options.whole_lists else ("key", "index", "value", *ttl)
    if kind is StateKind.AGGREGATING:
        return ("key", "accumulator", *ttl)
    return ("key", "value", *ttl)


def decode(
    state: str,
    meta: StateMeta,
    options: ReadOptions,
    read: Callable[[str], Iterator[tuple[int, Records]]],
    elements_meta: StateMeta | None = None,
) -> Iterator[Row]:
    """The rows of `state` from `read(name)`, which gives a state's records by key
    group; a window's elements (`elements_meta`: their state's layout, if the
    vertex has one) are read beside its windows."""
    if state == WINDOWS.name:
        yield from _windows(read, options, elements_meta)
        return
    codec = stored_codec(meta.kind, meta.ttl, options.serializer)
    if meta.ttl and options.now_ms is None:
        options = replace(options, now_ms=options.expired_by())
    for _, records in read(state):
        yield from _rows(state, meta, codec, options, records)


def _rows(state: str, meta: StateMeta, codec: Codec, options: ReadOptions, records: Records) -> Iterator[Row]:
    kind = meta.kind
    if kind is StateKind.TIMERS:
        domain = DOMAINS.get(state, state)
        for rest, _ in records:
            timestamp, key_bytes = split_timer_rest(rest)
            yield deserialize_key(key_bytes), timestamp, domain
        return
    for rest, data in records:
        stored = _loaded(state, codec, data)
        if meta.ttl and not options.include_expired:
            stored = codec.alive(stored, options.expired_by())
            if stored is None:
                continue
        if kind is StateKind.MAP:
            key_bytes, map_key = split_map_rest(rest)
            user_key = deserialize_key(map_key)
            if state == ELEMENTS.name:
                window, n = element_position(user_key)
                yield deserialize_key(key_bytes), window.start, window.end, n, stored
            else:
                yield (deserialize_key(key_bytes), user_key, *_with_expiry(stored, meta.ttl))
        elif kind is StateKind.LIST:
            yield from _list_rows(deserialize_key(rest), stored, meta.ttl, options.whole_lists)
        else:
            yield (deserialize_key(rest), *_with_expiry(stored, meta.ttl))


def _loaded(state: str, codec: Codec, data: bytes) -> Any:
    """A stored object; one that cannot be unpickled here is refused naming the state."""
    try:
        return codec.loads(data)
    except Exception as error:
        raise StateAccessError(
            f"state {state!r}: a value cannot be read back ({type(error).__name__}: {error}); a value of "
            "the job's own classes needs the job's code importable here (run in the job's directory, "
            "or set PYTHONPATH), and one written with a serializer of its own needs "
            "ReadOptions(serializer=...)"
        ) from error


def _with_expiry(stored: Any, ttl: bool) -> Row:
    """(value,) or, with TTL, (value, expires_at_ms) of a stored object."""
    if not ttl:
        return (stored,)
    expires_at, value = stored
    return value, expires_at


def _list_rows(key: Any, stored: list[Any], ttl: bool, whole: bool) -> Iterator[Row]:
    if whole:
        if ttl:
            yield key, [value for _, value in stored], [expires for expires, _ in stored]
        else:
            yield key, list(stored)
        return
    for index, element in enumerate(stored):
        yield (key, index, *_with_expiry(element, ttl))


def _windows(
    read: Callable[[str], Iterator[tuple[int, Records]]],
    options: ReadOptions,
    elements_meta: StateMeta | None,
) -> Iterator[Row]:
    """A window per row with what it holds; a process window's elements are
    gathered from `_window.elements` key group by key group."""
    meta = StateMeta(StateKind.MAP, ttl=False)
    codec = stored_codec(StateKind.MAP, False, options.serializer)
    elements = _elements_by_group(read, options) if elements_meta is not None else {}
    for group, records in read(WINDOWS.name):
        held_elements = elements.pop(group, {})
        for key, bounds, held in _rows(WINDOWS.name, meta, codec, options, records):
            window = window_of_bounds(bounds)
            if elements_meta is None:
                yield key, window.start, window.end, held
            else:
                by_index = held_elements.get((key, window.start, window.end), {})
                yield key, window.start, window.end, [by_index.get(n) for n in range(held)]


def _elements_by_group(
    read: Callable[[str], Iterator[tuple[int, Records]]], options: ReadOptions
) -> dict[int, dict[tuple[Any, int, int], dict[int, Any]]]:
    meta = StateMeta(StateKind.MAP, ttl=False)
    codec = stored_codec(StateKind.MAP, False, options.serializer)
    grouped: dict[int, dict[tuple[Any, int, int], dict[int, Any]]] = {}
    for group, records in read(ELEMENTS.name):
        windows = grouped.setdefault(group, {})
        for key, start, end, n, value in _rows(ELEMENTS.name, meta, codec, options, records):
            windows.setdefault((key, start, end), {})[n] = value
    return grouped


def as_dicts(names: tuple[str, ...], rows: Iterable[Row]) -> Iterator[dict[str, Any]]:
    for row in rows:
        yield dict(zip(names, row, strict=True))
