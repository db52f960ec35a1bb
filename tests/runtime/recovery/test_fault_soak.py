"""A seeded short fault soak (tests/faults/soak.py): the running-sum job on Spark
`local-cluster` with an external etcd, faults injected while input is appended,
the committed output and the latest checkpoint's state checked exactly against
the reference after every round. The long soak is bench/fault_soak.py.

Single faults that once broke exactly-once run here too, one test each (issue 14,
items 2, 3 and 4; issue 34, item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.schedule import Fault, Schedule, plan
from tests.faults.soak import Soak, SoakOptions, SoakReport
from tests.faults.soak_cluster import JobOptions

# What the short schedule draws from: what today's main survives every time, faults
# that fail a launch from a task's side. Left out: a killed driver (a new JVM and the
# dead one's lease, a minute more; test_driver_submit covers the wait for the lease),
# and every fault that fails a launch from the coordinator's side while its tasks
# live on — etcd killed, the driver or etcd paused past the lease, storage errors: the
# relaunch then races the old launch's tasks, which sometimes commit what the
# relaunch replays (issue 14, item 3; seen with etcd-kill, driver-pause and
# storage-eio-rename; the deterministic case is the xfail test below). The long soak
# runs every kind. Two rounds of these and of in-place rescales, then one late Kafka
# writer of an earlier launch (issue 34, item 1), which brings a Kafka sink, checked
# exactly too, into every round. The job runs with unaligned checkpoints: a kill -9
# restores, and a rescale stops at, checkpoints that hold records in flight.
SHORT_CLASSES = ("worker", "executor", "rescale")
SHORT_KINDS = ("worker-kill", "worker-pause", "executor-kill", "executor-pause", "rescale-in-place")
LATE_WRITER = "kafka-late-writer"


def _soak(
    tmp_path: Path, schedule: Schedule, options: SoakOptions, job: JobOptions | None = None
) -> SoakReport:
    report = Soak(tmp_path, schedule, options, job, say=lambda _: None).run()
    assert report.passed, f"{report.summary()}\nlogs: {tmp_path / 'failures'}"
    return report


@pytest.mark.timeout(900)
def test_a_seeded_short_soak_keeps_output_and_state_exact(tmp_path: Path) -> None:
    kills = plan(14, rounds=2, faults_per_round=2, window_s=6.0, classes=SHORT_CLASSES, kinds=SHORT_KINDS)
    late = plan(14, rounds=1, faults_per_round=1, window_s=6.0, classes=("kafka",))
    schedule = Schedule(kills.seed, kills.window_s, kills.rounds + late.rounds)
    unaligned = JobOptions(aligned_checkpoint_timeout_s=0.0)
    report = _soak(tmp_path, schedule, SoakOptions(rate=200.0, recovery_bound_s=180.0), unaligned)
    logs = "".join(log.read_text(errors="replace") for log in (tmp_path / "logs").glob("driver-*.log"))
    assert "records in flight (unaligned)" in logs, "no checkpoint kept records in flight: nothing was shown"
    injected = report.injected()
    assert sum(injected.values()) >= 4, f"the faults found their targets: {injected}"
    assert injected[LATE_WRITER] == 1, report.summary()
    # Seed 14 draws a worker paused, an in-place rescale, a worker killed, an executor paused.
    drawn = {i.fault.kind for r in report.rounds for i in r.injections}
    assert drawn == {"worker-pause", "rescale-in-place", "worker-kill", "executor-pause", LATE_WRITER}
    # Issue 34, item 1, on Spark: two drivers sharing etcd; a subtask of the first driver's
    # relaunch is held before its Kafka writer starts while that driver stalls and a
    # replacement restores the same checkpoint and commits more; released, the writer
    # sends nothing, and what a read_committed consumer sees is exact (the soak's check).
    (late_writer,) = [i for r in report.rounds for i in r.injections if i.fault.kind == LATE_WRITER]
    assert "released: refused: KafkaSink: the writer of" in late_writer.detail, late_writer.detail
    assert "sends nothing" in late_writer.detail, late_writer.detail


def _one_fault(kind: str, at_s: float = 3.0, hold_s: float = 0.0) -> Schedule:
    return Schedule(seed=14, window_s=6.0, rounds=((Fault(kind, at_s, hold_s, 14),),))


@pytest.mark.timeout(600)
def test_tasks_of_a_failed_launch_cannot_complete_checkpoints_or_commit(tmp_path: Path) -> None:
    _soak(tmp_path, _one_fault("executors-stall-relaunch", hold_s=12.0), SoakOptions(recovery_bound_s=90))


@pytest.mark.timeout(600)
def test_a_partitioned_exchange_fails_the_launch_within_seconds(tmp_path: Path) -> None:
    _soak(
        tmp_path, _one_fault("exchange-partition"), SoakOptions(partition_bound_s=20.0, recovery_bound_s=90)
    )


@pytest.mark.timeout(600)
def test_a_corrupted_latest_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    """A same-size byte flip in the latest checkpoint: the job (its drivers run with
    --accept-duplicate-output) restores the checkpoint before it instead of restarting
    on the damaged one forever, loses nothing and keeps every sum right. The one cost, logged and documented, is the output the
    damaged checkpoint's sinks had committed: replayed from the one before, it is
    committed a second time; the check allows exactly that (records of the files a
    checkpoint marked unusable committed, each exactly twice) and nothing more."""
    _soak(tmp_path, _one_fault("checkpoint-flip"), SoakOptions(recovery_bound_s=60.0))
