"""The driver's metrics: checkpoints (from the coordinator), restarts, settings."""

from __future__ import annotations

import time

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LABELS = ["job_namespace", "job_id"]
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class JobMetrics:
    """A `JobListener`: counts what the coordinator and the job master report."""

    def __init__(self, keys: JobKeys, config: CheckpointConfig, parallelism: int) -> None:
        self.registry = registry = CollectorRegistry()
        job = [keys.namespace, keys.job]
        self._restarts = Counter(
            "lockgate_restarts", "Relaunches of the job's tasks after a failure.", LABELS, registry=registry
        ).labels(*job)
        kinds = [*LABELS, "kind"]
        self._completed = Counter(
            "lockgate_checkpoints_completed",
            "Completed checkpoints and savepoints.",
            kinds,
            registry=registry,
        )
        self._failed = Counter(
            "lockgate_checkpoints_failed", "Aborted checkpoints and savepoints.", kinds, registry=registry
        )
        self._duration = Histogram(
            "lockgate_checkpoint_duration_seconds",
            "From trigger to completion.",
            kinds,
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        # Both appear with the first completed checkpoint: a zero would read as one
        # completed in 1970 (alerts fall back to the job's start time until then).
        self._size = Gauge(
            "lockgate_checkpoint_size_bytes",
            "Bytes the last completed checkpoint references (shared files included).",
            LABELS,
            registry=registry,
        )
        self._last = Gauge(
            "lockgate_last_checkpoint_completed_timestamp_seconds",
            "When the last checkpoint completed (Unix time).",
            LABELS,
            registry=registry,
        )
        for kind in ("checkpoint", "savepoint"):  # zeros, so rates exist before the first
            self._completed.labels(*job, kind)
            self._failed.labels(*job, kind)

        def setting(name: str, documentation: str, value: float) -> None:
            Gauge(name, documentation, LABELS, registry=registry).labels(*job).set(value)

        setting("lockgate_job_start_time_seconds", "When the driver started (Unix time).", time.time())
        setting("lockgate_job_parallelism", "Subtasks per vertex.", parallelism)
        if config.interval_s is not None:
            setting("lockgate_checkpoint_interval_seconds", "The configured interval.", config.interval_s)
        self._job = job

    def completed(self, checkpoint: CompletedCheckpoint) -> None:
        self._completed.labels(*self._job, checkpoint.kind).inc()
        self._duration.labels(*self._job, checkpoint.kind).observe(checkpoint.duration_ms / 1000)
        if checkpoint.kind == "checkpoint":
            self._size.labels(*self._job).set(checkpoint.bytes)
            self._last.labels(*self._job).set(checkpoint.completed_ms / 1000)

    def restarted(self) -> None:
        self._restarts.inc()

    def aborted(self, trigger: Trigger, reason: str) -> None:
        self._failed.labels(*self._job, trigger.kind).inc()
