"""A job's load as its task metrics recorded it, and what one window of it says.

A `LoadSample` is one scrape of every subtask: per chain (named by its first
vertex, as `lockgate_busy_seconds` labels it) the counters since the subtask
started — records into the chain (a source: records read), busy and
backpressured seconds — and per source subtask its backlog in records, or None
when the source cannot tell. `measure` turns the samples of one window into
rates; a window whose metrics are incomplete raises `IncompleteMetricsError`
naming what is missing, so that no decision is taken on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lockgate.runtime.keygroups import key_group_range

KEY_GROUP_SAMPLE = 1000
"""Records a window must take in for its own key-group counts to size by: fewer
spread over a keyed chain's key groups say more of chance than of skew (at 1000,
a subtask of 8 takes about 125, give or take a tenth); below it, the launch's
counts since it started, the key space changing more slowly than a window."""


class IncompleteMetricsError(Exception):
    """The window's metrics cannot support a decision; the message says why."""


@dataclass(frozen=True)
class SubtaskLoad:
    """One subtask of one chain at one scrape: its counters since it started."""

    vertex: str
    subtask: int
    records_in: int
    busy_s: float
    backpressured_s: float = 0.0
    source: bool = False
    backlog: int | None = None
    """A source subtask's records yet to read; None: the source cannot tell."""
    partitions: int | None = None
    """How many partitions a source subtask reads (a Kafka topic's it is assigned);
    None: the source is not partitioned."""
    key_group_first: int | None = None
    """A keyed chain's subtask: the first key group of its range (None: not counted)."""
    key_group_records: tuple[int, ...] | None = None
    """Records in per key group of its range, from `key_group_first` on, since it started."""


@dataclass(frozen=True)
class LoadSample:
    """Every subtask's counters at `at_s` (seconds on one clock), running at `parallelism`."""

    at_s: float
    parallelism: int
    subtasks: tuple[SubtaskLoad, ...]


@dataclass(frozen=True)
class ChainRates:
    """One chain over a window, all its subtasks together."""

    vertex: str
    source: bool
    records_per_s: float
    """Records into the chain per second (a source: records read)."""
    true_rate: float | None
    """Records a subtask processes per busy second (all records over all busy
    time: the mean subtask); None when the chain did no measurable work."""
    busy: float
    """Mean busy fraction of its subtasks."""
    max_busy: float
    """The busiest subtask's busy fraction."""
    idle: float
    """Mean fraction of time its subtasks waited for input."""
    records_since_start: int = 0
    """Records into the chain since its subtasks started (the launch)."""
    key_group_records: tuple[int, ...] | None = None
    """A keyed chain: records in per key group (all of them, from 0) over the
    window, or since the launch started when the window took fewer than
    `KEY_GROUP_SAMPLE`; None when a subtask did not count them."""

    def busiest_share(self, parallelism: int) -> float:
        """The share of the chain's records the busiest of `parallelism` subtasks
        would take in, its key groups split as `key_group_range` splits them
        (1 / parallelism when the key-group counts are unknown or all zero)."""
        counts = self.key_group_records
        total = sum(counts) if counts is not None else 0
        if counts is None or total <= 0:
            return 1 / parallelism
        parallelism = min(parallelism, len(counts))
        owned = (key_group_range(len(counts), parallelism, index) for index in range(parallelism))
        return max(sum(counts[r.start : r.stop]) for r in owned) / total


@dataclass(frozen=True)
class WindowLoad:
    """What the metrics of [start_s, end_s] say: the inputs of a decision."""

    start_s: float
    end_s: float
    chains: tuple[ChainRates, ...]
    read_rate: float
    """Records per second all sources read."""
    backlog: int | None
    """Records all sources had yet to read at the end; None: some cannot tell."""
    backlog_growth: float | None
    """Backlog growth per second over the window (records arriving faster than read)."""
    unknown_backlog: tuple[str, ...]
    """The source subtasks (`vertex/subtask`) that cannot tell their backlog."""
    read_since_start: int = 0
    """Records all sources read since the launch started."""
    recent_input_rate: float | None = None
    """The input rate over the window's second half (from the newest sample at or
    before its middle); None when the backlog is unknown or no sample lies there."""

    @property
    def input_rate(self) -> float:
        """Records per second arriving at the sources: what they read plus what
        piled up (the read rate alone, when the backlog is unknown)."""
        return max(0.0, self.read_rate + (self.backlog_growth or 0.0))

    @property
    def sources_idle(self) -> float:
        """The least idle fraction among the source chains (1.0 without sources)."""
        return min((c.idle for c in self.chains if c.source), default=1.0)


def measure(
    series: Sequence[LoadSample], *, parallelism: int, since_s: float, window_s: float, now_s: float
) -> WindowLoad:
    """Rates over the last `window_s` of the samples taken at `parallelism` from
    `since_s` up to `now_s` (the newest sample and the newest at least `window_s`
    before it). Raises `IncompleteMetricsError` when the samples cover less than
    the window, the newest is older than the window, or a subtask is missing or
    restarted (its counters went back)."""
    eligible = [s for s in series if since_s <= s.at_s <= now_s and s.parallelism == parallelism]
    if not eligible:
        raise IncompleteMetricsError(f"no metrics at parallelism {parallelism} since {since_s:g} s")
    last = eligible[-1]
    if now_s - last.at_s > window_s:
        raise IncompleteMetricsError(
            f"the newest metrics are {now_s - last.at_s:g} s old (window {window_s:g} s)"
        )
    earlier = [s for s in eligible if s.at_s <= last.at_s - window_s]
    if not earlier:
        covered = last.at_s - eligible[0].at_s
        raise IncompleteMetricsError(
            f"the metrics since {since_s:g} s cover {covered:g} s of the {window_s:g} s window"
        )
    first = earlier[-1]
    before, after = _complete(first, parallelism), _complete(last, parallelism)
    if set(before) != set(after):
        (vertex, subtask) = key = sorted(set(before) ^ set(after))[0]
        missing_at = last.at_s if key in before else first.at_s
        raise IncompleteMetricsError(f"no metrics of {vertex}/{subtask} at {missing_at:g} s")
    inside = [s for s in eligible if first.at_s <= s.at_s <= last.at_s]
    load = _rates(first, last, before, after)
    _check_backlog_fresh(inside, last)
    middle = [s for s in inside if first.at_s < s.at_s <= last.at_s - window_s / 2]
    if load.backlog is None or not middle:
        return load
    try:
        at_middle = _complete(middle[-1], parallelism)
        if set(at_middle) != set(after):
            return load
        half = _rates(middle[-1], last, at_middle, after)
    except IncompleteMetricsError:  # the middle sample lacks a subtask: no second half to tell
        return load
    return replace(load, recent_input_rate=half.input_rate)


def _check_backlog_fresh(window: Sequence[LoadSample], last: LoadSample) -> None:
    """Raises unless each source subtask's end of input at the window's last sample
    — records it read plus its backlog — is at least what it was at every earlier
    sample of the window. The end only grows; a backlog that says less is older
    than the records read beside it (a Kafka source's is the high watermark of its
    last fetch response, and a fetch waits while the consumer's prefetch queue is
    full), and sizing by it would take the input for less than it is."""
    ends: dict[tuple[str, int], tuple[int, float]] = {}
    for sample in window[:-1]:
        for s in sample.subtasks:
            if s.source and s.backlog is not None:
                end = s.records_in + s.backlog
                if end > ends.get((s.vertex, s.subtask), (-1, 0.0))[0]:
                    ends[(s.vertex, s.subtask)] = (end, sample.at_s)
    for s in last.subtasks:
        if not s.source or s.backlog is None or (s.vertex, s.subtask) not in ends:
            continue
        (peak, at_s), end = ends[(s.vertex, s.subtask)], s.records_in + s.backlog
        if end < peak:
            raise IncompleteMetricsError(
                f"the backlog of {s.vertex}/{s.subtask} at the window's end is stale: records read plus "
                f"backlog ({end}) fell below the {peak} of {last.at_s - at_s:.3g} s before (the source's end "
                "of input lags what it read)"
            )


def _complete(sample: LoadSample, parallelism: int) -> dict[tuple[str, int], SubtaskLoad]:
    """The sample's subtasks by (vertex, subtask); raises unless every chain has all of them."""
    found = {(s.vertex, s.subtask): s for s in sample.subtasks}
    for vertex in sorted({v for v, _ in found}):
        for subtask in range(parallelism):
            if (vertex, subtask) not in found:
                raise IncompleteMetricsError(f"no metrics of {vertex}/{subtask} at {sample.at_s:g} s")
    return found


def _rates(
    first: LoadSample,
    last: LoadSample,
    before: dict[tuple[str, int], SubtaskLoad],
    after: dict[tuple[str, int], SubtaskLoad],
) -> WindowLoad:
    seconds = last.at_s - first.at_s
    by_chain: dict[str, list[tuple[SubtaskLoad, SubtaskLoad]]] = {}
    for key, end in sorted(after.items()):
        start = before[key]
        if end.records_in < start.records_in or end.busy_s < start.busy_s:
            raise IncompleteMetricsError(
                f"the counters of {key[0]}/{key[1]} went back between {first.at_s:g} s and "
                f"{last.at_s:g} s: the subtask restarted"
            )
        by_chain.setdefault(key[0], []).append((start, end))
    chains = tuple(_chain(vertex, pairs, seconds) for vertex, pairs in by_chain.items())
    sources = [pair for pairs in by_chain.values() for pair in pairs if pair[1].source]
    unknown = tuple(
        f"{end.vertex}/{end.subtask}" for start, end in sources if None in (start.backlog, end.backlog)
    )
    backlog = growth = None
    if not unknown:
        backlog = sum(end.backlog or 0 for _, end in sources)
        growth = (backlog - sum(start.backlog or 0 for start, _ in sources)) / seconds
    read = sum(c.records_per_s for c in chains if c.source)
    read_since_start = sum(c.records_since_start for c in chains if c.source)
    return WindowLoad(
        first.at_s, last.at_s, chains, read, backlog, growth, unknown, read_since_start=read_since_start
    )


def _chain(vertex: str, pairs: list[tuple[SubtaskLoad, SubtaskLoad]], seconds: float) -> ChainRates:
    records = sum(end.records_in - start.records_in for start, end in pairs)
    busy = [(end.busy_s - start.busy_s) / seconds for start, end in pairs]
    blocked = [(end.backpressured_s - start.backpressured_s) / seconds for start, end in pairs]
    busy_s = sum(busy) * seconds
    true_rate = records / busy_s if busy_s > 0 and records > 0 else None
    idle = sum(max(0.0, 1.0 - b - p) for b, p in zip(busy, blocked, strict=True)) / len(pairs)
    since_start = sum(end.records_in for _, end in pairs)
    return ChainRates(
        vertex,
        pairs[0][1].source,
        records / seconds,
        true_rate,
        sum(busy) / len(pairs),
        max(busy),
        idle,
        since_start,
        _key_group_records(pairs),
    )


def _key_group_records(pairs: list[tuple[SubtaskLoad, SubtaskLoad]]) -> tuple[int, ...] | None:
    """Records in per key group of the chain over the window (since the launch
    started, when the window took fewer than `KEY_GROUP_SAMPLE`); None unless every
    subtask counted them, over the same range at both ends, and the ranges together
    are the key groups from 0 on, each once."""
    window: dict[int, int] = {}
    launch: dict[int, int] = {}
    for start, end in pairs:
        first, before, after = end.key_group_first, start.key_group_records, end.key_group_records
        if first is None or before is None or after is None:
            return None
        if start.key_group_first != first or len(before) != len(after):
            return None
        for offset, (was, now) in enumerate(zip(before, after, strict=True)):
            window[first + offset] = max(0, now - was)
            launch[first + offset] = now
    counted = sum(len(end.key_group_records or ()) for _, end in pairs)
    if sorted(window) != list(range(len(window))) or counted != len(window):
        return None
    chosen = window if sum(window.values()) >= KEY_GROUP_SAMPLE else launch
    return tuple(chosen[group] for group in range(len(chosen)))
