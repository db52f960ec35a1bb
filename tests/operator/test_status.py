"""The upgrade plan as status keeps it: what one operator writes, the next reads."""

from __future__ import annotations

import pytest
from lockgate.operator.upgrade_plan import Step, UpgradePlan


def test_a_plan_reads_back_as_it_was_written() -> None:
    plan = UpgradePlan(Step.SAVEPOINT, "upgrade", 3, request="upgrade-g2-l3", generation=2, started_at=10.5)
    assert UpgradePlan.from_status(plan.for_status()) == plan
    taken = plan.at(Step.STOPPING, restore="savepoint", savepoint="s3://b/ns/sp-1")
    assert UpgradePlan.from_status(taken.for_status()) == taken
    assert taken.for_status()["step"] == "stopping", "status holds plain strings"


def test_a_plan_an_earlier_operator_recorded_is_resumed() -> None:
    """Written before plans were records: no startedAt, no import flag, no restore yet."""
    earlier = {
        "step": "savepoint",
        "reason": "upgrade",
        "launch": 2,
        "suspend": False,
        "generation": 4,
        "request": "r",
    }
    plan = UpgradePlan.from_status(earlier)
    assert (plan.step, plan.launch, plan.restore, plan.imported, plan.started_at) == (
        Step.SAVEPOINT,
        2,
        "latest",
        False,
        None,
    )


def test_a_damaged_record_is_named() -> None:
    with pytest.raises(ValueError, match="'sometime'"):
        UpgradePlan.from_status({"step": "savepoint", "launch": 1, "restore": "sometime"})
    with pytest.raises(ValueError, match="'jumping'"):
        UpgradePlan.from_status({"step": "jumping", "launch": 1})
