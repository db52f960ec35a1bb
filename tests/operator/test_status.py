"""The operator's status record as a StreamingJob keeps it: what one operator
writes, the next reads; only what changes is written; the CRD declares every
field of it, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from lockgate.operator.conditions import changing
from lockgate.operator.crd import streamingjob_crd
from lockgate.operator.phase import JobPhase
from lockgate.operator.savepoint_history import completed, failed
from lockgate.operator.status import (
    AutoscalerRescale,
    AutoscalerView,
    CheckpointSummary,
    Deployment,
    Failure,
    StreamingJobStatus,
)
from lockgate.operator.upgrade_plan import Step, UpgradePlan
from lockgate.runtime.failure_class import FailureClass

from tests.operator.cluster_helpers import undeclared_status_fields

PLAN = UpgradePlan(Step.SAVEPOINT, "upgrade", 3, request="upgrade-g2-l3", generation=2, started_at=10.5)
EVERY_FIELD = StreamingJobStatus(
    phase=JobPhase.FAILED,
    message="driver sums-driver-2 failed (code failure): no module named jobs",
    conditions=changing((), "Upgrading", "upgrade: savepoint, then launch 3", 2),
    observed_generation=2,
    accepted_spec='{"replicas": 2}',
    accepted_generation=2,
    launch=2,
    deployment=Deployment(2, "savepoint", "s3://b/ns/savepoint-1"),
    upgrade=PLAN.at(Step.STOPPING, restore="savepoint", savepoint="s3://b/ns/savepoint-2", imported=True),
    suspended_with="latest",
    max_parallelism=128,
    replicas=0,
    selector="lockgate.dev/job=sums",
    job_id="default/sums",
    restarts=3,
    failure=Failure(FailureClass.CODE, "no module named jobs", "sums-driver-2", "Traceback ..."),
    last_checkpoint=CheckpointSummary(7, "2026-01-01T00:00:00Z", 1000, 250),
    last_savepoint=completed("s3://b/ns/savepoint-2", "upgrade", 1000, 1.7e9),
    savepoints=(
        completed("s3://b/ns/savepoint-2", "upgrade", 1000, 1.7e9),
        failed("periodic", "disk full", 1.6e9),
    ),
    next_periodic_savepoint="2026-01-01T01:00:00Z",
    driver_restarts=2,
    driver_failure_times=(10.0, 20.5),
    restart_at=1.8e9,
    autoscaler=AutoscalerView(
        2,
        1,
        8,
        1_800_000_000_000,
        {"atMs": 1_800_000_000_000, "action": "hold", "reason": "utilization 0.5 within bounds"},
        recommendation=2,
        inputs={"inputRate": 1200.0, "chains": {"sum": {"busy": 0.5}}},
        history=(AutoscalerRescale(1, 1_799_999_000_000, "scale-up", 1, 2, "backlog", "rescaled", "1.2 s"),),
    ),
)


def _crd_status_fields() -> set[str]:
    (version,) = streamingjob_crd()["spec"]["versions"]
    return set(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])


def test_a_status_reads_back_as_it_was_written() -> None:
    stored = EVERY_FIELD.for_storage()
    assert StreamingJobStatus.from_storage(stored) == EVERY_FIELD
    assert stored["upgrade"]["step"] == "stopping", "status holds plain strings"
    assert stored["upgrade"]["import"] is True
    assert stored["failure"]["class"] == "code"
    assert stored["lastCheckpoint"]["durationMs"] == 250
    assert StreamingJobStatus.from_storage({}) == StreamingJobStatus(), "a new job's status"


def test_the_crd_declares_every_field_of_the_record_and_nothing_else() -> None:
    """The API server prunes what its schema does not declare, and refuses what does
    not fit it: a status of the record's is kept whole, and nothing else is taken."""
    stored = EVERY_FIELD.for_storage()
    assert undeclared_status_fields(stored) == []
    assert set(stored) == _crd_status_fields(), "every field set: every field the CRD declares"


def test_only_what_changes_is_written_and_an_unset_field_is_removed() -> None:
    before = StreamingJobStatus(
        phase=JobPhase.RESTARTING, launch=2, restart_at=1.8e9, driver_failure_times=(10.0,)
    )
    after = before.changed(phase=JobPhase.DEPLOYING, launch=2, restart_at=None, driver_restarts=1)
    assert before.patch_to(after) == {"phase": "Deploying", "restartAt": None, "driverRestarts": 1}
    assert after.patch_to(after) == {}


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ({"upgrade": {"step": "jumping", "reason": "upgrade", "launch": 1}}, "status.upgrade.step"),
        (
            {"upgrade": {"step": "savepoint", "reason": "upgrade", "launch": 1, "restore": "sometime"}},
            "restore",
        ),
        ({"launch": "two"}, "status.launch"),
        ({"failure": {"class": "cosmic", "message": "?"}}, "status.failure.class"),
    ],
)
def test_a_status_the_operator_did_not_write_is_refused_naming_the_field(
    stored: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match="not what the operator writes") as refused:
        StreamingJobStatus.from_storage(stored)
    assert named in str(refused.value)
