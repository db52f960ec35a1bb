"""A task's metrics, read from its counters when Prometheus scrapes.

The chain threads keep plain counters (one writer each); reading them at
scrape time costs the record path nothing. Alignment times are observed into
a histogram as they happen, once per checkpoint. The load signals an
autoscaler sizes a job by — busy time, records in and out per second, each
source's backlog — are counters here too, with gauges of their recent rates
(rates.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from lockgate.runtime.api.connectors import Backlog
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.metrics.rates import RATE_WINDOW_S, WindowedRates
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LABELS = ["job_namespace", "job_id", "vertex", "subtask"]
ALIGNMENT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)


class _Counter(Protocol):
    @property
    def count(self) -> int: ...


class _Vertex(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...


class _Chain(Protocol):
    @property
    def head(self) -> _Vertex: ...

    @property
    def backlog(self) -> Backlog | None: ...


class _Config(Protocol):
    @property
    def index(self) -> int: ...


class ObservedTask(Protocol):
    """What the metrics read of a task (the engine's `Task`): a view, so the
    engine, which serves its tasks' metrics, is the one that imports the other."""

    alignment_listener: Callable[[str, float, bool], None]

    @property
    def config(self) -> _Config: ...

    @property
    def records_in(self) -> Mapping[str, _Counter]: ...

    @property
    def records_out(self) -> Mapping[str, _Counter]: ...

    @property
    def late_records_dropped(self) -> Mapping[str, _Counter]: ...

    @property
    def state_bytes(self) -> Mapping[str, int]: ...

    @property
    def chains(self) -> Sequence[_Chain]: ...

    def backpressured_s(self) -> Mapping[str, float]: ...

    def busy_s(self) -> Mapping[str, float]: ...


class TaskCollector(Collector):
    def __init__(self, task: ObservedTask, keys: JobKeys) -> None:
        self._task = task
        self._job = [keys.namespace, keys.job]
        self._subtask = str(task.config.index)
        self._rates = WindowedRates(time.monotonic, time.monotonic())

    def _labels(self, vertex: str) -> list[str]:
        return [*self._job, vertex, self._subtask]

    def collect(self) -> Iterable[Metric]:
        task = self._task
        records_in = CounterMetricFamily(
            "lockgate_records_in", "Records into a vertex's subtask.", labels=LABELS
        )
        for vertex, counted in task.records_in.items():
            records_in.add_metric(self._labels(vertex), counted.count)
        records_out = CounterMetricFamily(
            "lockgate_records_out", "Records a vertex's subtask emitted.", labels=LABELS
        )
        for vertex, counted in task.records_out.items():
            records_out.add_metric(self._labels(vertex), counted.count)
        late = CounterMetricFamily(
            "lockgate_late_records_dropped",
            "Records a window vertex dropped: every window they belong to had closed "
            "(its end plus the allowed lateness was at or before the watermark).",
            labels=LABELS,
        )
        for vertex, counted in task.late_records_dropped.items():
            late.add_metric(self._labels(vertex), counted.count)
        blocked = CounterMetricFamily(
            "lockgate_backpressured_seconds",
            "Seconds a subtask waited for room in the channels to the next vertex; "
            "its rate is the share of time backpressured (0 to 1).",
            labels=LABELS,
        )
        for vertex, seconds in task.backpressured_s().items():
            blocked.add_metric(self._labels(vertex), seconds)
        state = GaugeMetricFamily(
            "lockgate_state_size_bytes", "Bytes of a subtask's state in its last snapshot.", labels=LABELS
        )
        for vertex, size in task.state_bytes.items():
            state.add_metric(self._labels(vertex), size)
        yield from (records_in, records_out, late, blocked, state)
        yield from self._load()
        yield from self._lag()

    def _load(self) -> Iterable[Metric]:
        """Busy time per chain (labelled with its first vertex) and the recent
        rates of busy time and records."""
        task = self._task
        busy_s = task.busy_s()
        busy = CounterMetricFamily(
            "lockgate_busy_seconds",
            "Seconds a chain's thread (named by its first vertex) worked: not waiting for "
            "input, nor for room downstream; its rate is the busy fraction (0 to 1).",
            labels=LABELS,
        )
        for vertex, seconds in busy_s.items():
            busy.add_metric(self._labels(vertex), seconds)
        counters: dict[str, float] = {f"busy/{v}": s for v, s in busy_s.items()}
        counters.update({f"in/{v}": c.count for v, c in task.records_in.items()})
        counters.update({f"out/{v}": c.count for v, c in task.records_out.items()})
        rates = self._rates.rates(counters)
        window = f" (over the last {RATE_WINDOW_S:g} s)"
        gauges = {
            "busy": GaugeMetricFamily(
                "lockgate_busy_ratio", "A chain's busy fraction" + window + ".", labels=LABELS
            ),
            "in": GaugeMetricFamily(
                "lockgate_records_in_per_second",
                "Records into a vertex's subtask per second" + window + ".",
                labels=LABELS,
            ),
            "out": GaugeMetricFamily(
                "lockgate_records_out_per_second",
                "Records a vertex's subtask emitted per second" + window + ".",
                labels=LABELS,
            ),
        }
        for name, rate in sorted(rates.items()):
            kind, vertex = name.split("/", 1)
            gauges[kind].add_metric(self._labels(vertex), min(rate, 1.0) if kind == "busy" else rate)
        yield busy
        yield from gauges.values()

    def _lag(self) -> Iterable[Metric]:
        records = GaugeMetricFamily(
            "lockgate_source_lag_records", "Records a source subtask has yet to read.", labels=LABELS
        )
        size = GaugeMetricFamily(
            "lockgate_source_lag_bytes", "Bytes a source subtask has yet to read.", labels=LABELS
        )
        known = GaugeMetricFamily(
            "lockgate_source_lag_known",
            "1: the source subtask tells its lag (lockgate_source_lag_records or _bytes, 0 "
            "when it has read everything); 0: it cannot tell, and those series are absent.",
            labels=LABELS,
        )
        for chain in self._task.chains:
            if chain.head.kind != "source":
                continue
            labels = self._labels(chain.head.name)
            backlog = chain.backlog
            known.add_metric(labels, 1 if backlog is not None and backlog.known else 0)
            if backlog is None:
                continue
            if backlog.records is not None:
                records.add_metric(labels, backlog.records)
            if backlog.bytes is not None:
                size.add_metric(labels, backlog.bytes)
        yield from (records, size, known)


def task_registry(task: ObservedTask, keys: JobKeys) -> CollectorRegistry:
    """A registry of this task alone (a reused Python worker must not carry an
    earlier task's series)."""
    registry = CollectorRegistry()
    registry.register(TaskCollector(task, keys))
    alignment = Histogram(
        "lockgate_checkpoint_alignment_seconds",
        "From a keyed subtask's first barrier of a checkpoint to its last.",
        LABELS,
        registry=registry,
        buckets=ALIGNMENT_BUCKETS,
    )
    unaligned_checkpoints = Counter(
        "lockgate_checkpoints_unaligned",
        "Checkpoints a keyed subtask took unaligned, keeping the records in flight as channel state.",
        LABELS,
        registry=registry,
    )
    subtask = str(task.config.index)

    def aligned(vertex: str, seconds: float, unaligned: bool) -> None:
        alignment.labels(keys.namespace, keys.job, vertex, subtask).observe(seconds)
        counter = unaligned_checkpoints.labels(keys.namespace, keys.job, vertex, subtask)
        if unaligned:
            counter.inc()

    task.alignment_listener = aligned
    return registry
