"""The operator's Prometheus metrics (`lockgate_operator_` prefix)."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from importlib.metadata import version

from lockgate.operator.phase import JobPhase
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

# Beside the drivers' 9249 and the tasks' 9250; not 9090, Prometheus's own port,
# which an operator run beside a local Prometheus would take.
OPERATOR_METRICS_PORT = 9251
DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


@dataclass
class OperatorMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.reconciles = Counter(
            "lockgate_operator_reconciles",
            "Handler runs by handler and result (ok, retry, permanent, error).",
            ["handler", "result"],
            registry=self.registry,
        )
        self.jobs = Gauge(
            "lockgate_operator_jobs", "StreamingJobs by phase.", ["phase"], registry=self.registry
        )
        self.upgrade_seconds = Histogram(
            "lockgate_operator_upgrade_duration_seconds",
            "From a change's first step to its new driver's creation, by job and reason "
            "(upgrade: a rescale or another spec change; suspend, resume, restart, driver-lost).",
            ["job_namespace", "job_id", "reason"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.savepoint_seconds = Histogram(
            "lockgate_operator_savepoint_duration_seconds",
            "From a savepoint request to its result, by job and result (completed, failed, timeout).",
            ["job_namespace", "job_id", "result"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        # Per job, so that an alert names the job (the labels of the drivers' metrics:
        # Prometheus keeps `namespace` and `job` for the target scraped).
        self.phase_of_job = Gauge(
            "lockgate_job_phase",
            "1 for the phase each StreamingJob is in, 0 for the others.",
            ["job_namespace", "job_id", "phase"],
            registry=self.registry,
        )
        Info("lockgate_build", "The operator's version.", registry=self.registry).info(
            {"version": version("lockgate"), "python": platform.python_version()}
        )
        self._phases: dict[str, JobPhase] = {}
        self._durations: dict[str, set[tuple[Histogram, str]]] = {}  # a job's series, to remove

    def upgrade_took(self, job: str, reason: str, seconds: float) -> None:
        """A change of `job` ("namespace/name") for `reason` was carried out in `seconds`."""
        self._observe(self.upgrade_seconds, job, reason, seconds)

    def savepoint_took(self, job: str, result: str, seconds: float) -> None:
        self._observe(self.savepoint_seconds, job, result, seconds)

    def _observe(self, histogram: Histogram, job: str, label: str, seconds: float) -> None:
        namespace, _, name = job.partition("/")
        histogram.labels(namespace, name, label).observe(seconds)
        self._durations.setdefault(job, set()).add((histogram, label))

    def job_phase(self, job: str, phase: JobPhase | None) -> None:
        """Count `job` ("namespace/name") under `phase` (None: the job is gone)."""
        namespace, _, name = job.partition("/")
        if phase is None:
            if self._phases.pop(job, None) is not None:
                for known in JobPhase:
                    self.phase_of_job.remove(namespace, name, known)
            for histogram, label in self._durations.pop(job, set()):
                histogram.remove(namespace, name, label)
        else:
            self._phases[job] = phase
            for known in JobPhase:
                self.phase_of_job.labels(namespace, name, known).set(1 if known == phase else 0)
        for known in JobPhase:
            self.jobs.labels(known).set(sum(1 for p in self._phases.values() if p == known))
