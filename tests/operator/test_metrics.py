"""The operator's metrics per job: an alert names the job, and a deleted job's
series go with it (a stale `Failed` would keep its alert firing)."""

from __future__ import annotations

from lockgate.operator.metrics import OperatorMetrics
from lockgate.operator.phase import JobPhase


def test_each_job_is_in_one_phase_and_a_deleted_one_leaves_no_series() -> None:
    metrics = OperatorMetrics()
    sample = metrics.registry.get_sample_value
    metrics.job_phase("streams/a", JobPhase.RUNNING)
    metrics.job_phase("streams/b", JobPhase.RUNNING)
    metrics.job_phase("streams/a", JobPhase.FAILED)
    a = {"job_namespace": "streams", "job_id": "a"}
    assert sample("lockgate_job_phase", {**a, "phase": "Failed"}) == 1
    assert sample("lockgate_job_phase", {**a, "phase": "Running"}) == 0
    assert sample("lockgate_operator_jobs", {"phase": "Running"}) == 1
    metrics.job_phase("streams/a", None)
    assert all(sample("lockgate_job_phase", {**a, "phase": phase}) is None for phase in JobPhase)
    assert sample("lockgate_job_phase", {"job_namespace": "streams", "job_id": "b", "phase": "Running"}) == 1
    metrics.job_phase("streams/a", None)  # deleted twice (a retried finalizer): no error


def test_upgrade_and_savepoint_durations_are_kept_per_job_and_go_with_it() -> None:
    metrics = OperatorMetrics()
    sample = metrics.registry.get_sample_value
    metrics.job_phase("streams/a", JobPhase.UPGRADING)
    metrics.upgrade_took("streams/a", "upgrade", 12.5)
    metrics.savepoint_took("streams/a", "completed", 3.0)
    metrics.savepoint_took("streams/b", "timeout", 300.0)
    a = {"job_namespace": "streams", "job_id": "a"}
    assert sample("lockgate_operator_upgrade_duration_seconds_sum", {**a, "reason": "upgrade"}) == 12.5
    assert sample("lockgate_operator_savepoint_duration_seconds_count", {**a, "result": "completed"}) == 1
    metrics.job_phase("streams/a", None)
    assert sample("lockgate_operator_upgrade_duration_seconds_count", {**a, "reason": "upgrade"}) is None
    assert sample("lockgate_operator_savepoint_duration_seconds_count", {**a, "result": "completed"}) is None
    b = {"job_namespace": "streams", "job_id": "b", "result": "timeout"}
    assert sample("lockgate_operator_savepoint_duration_seconds_count", b) == 1
