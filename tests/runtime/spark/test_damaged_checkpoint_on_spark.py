"""A task on Spark finds the checkpoint it restores damaged: its error reaches the
driver only as the text of Spark's stage failure, and that is enough to mark the
checkpoint unusable and, the duplicates accepted, relaunch from the one before it."""

from __future__ import annotations

from typing import Any

from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.spark import BarrierStage

from tests.runtime.engine.test_damaged_checkpoints import Driver, WatchedStage, driver

__all__ = ["driver"]


async def test_a_spark_task_finding_its_checkpoint_damaged_moves_the_job_to_the_one_before(
    spark: Any, driver: Driver
) -> None:
    older, latest = await driver.fail_after_two_checkpoints()  # in-process: quicker
    duplicated = driver.committed_by(latest)

    stage = WatchedStage(BarrierStage(spark), damage=True)
    master = await driver.run(
        stage, restart_strategy("fixed-delay", attempts=3, delay_s=0), accept_duplicates=True
    )

    assert stage.restored == [latest.path, older.path]
    assert master.restarts == 1
    driver.assert_output_written_again_after(duplicated)
