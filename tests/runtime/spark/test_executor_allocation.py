"""Executors for a rescale's new parallelism, on a local master: its tasks are
threads of the driver's JVM, so there is nothing to ask Spark for, but a
parallelism above its slots is refused at once, naming both."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.spark import BarrierStage
from lockgate.runtime.spark.executor_allocation import (
    ExecutorAllocation,
    ExecutorReservationError,
    executors_for,
)

LONG_BOUND_S = 120.0  # a refusal must not wait for it


@pytest.mark.parametrize(
    ("parallelism", "slots", "executors"),
    [(1, 1, 1), (4, 1, 4), (4, 2, 2), (5, 2, 3), (3, 4, 1)],
)
def test_a_barrier_stage_needs_executors_for_all_its_tasks_at_once(
    parallelism: int, slots: int, executors: int
) -> None:
    assert executors_for(parallelism, slots) == executors


def test_a_local_master_reserves_up_to_its_slots_without_asking_spark(spark: Any) -> None:
    allocation = ExecutorAllocation(spark)
    assert allocation.local
    assert allocation.slots() == 3  # the session's local[3]
    assert allocation.executors_needed(3) == 0, "the tasks are threads of the driver"
    started = time.monotonic()
    for parallelism in (1, 2, 3):
        allocation.reserve(parallelism, LONG_BOUND_S)
    assert time.monotonic() - started < 5.0, "nothing to wait for"
    assert allocation.release_surplus(1) == []


def test_a_parallelism_above_the_local_slots_is_refused_at_once_naming_both(spark: Any) -> None:
    stage = BarrierStage(spark)
    started = time.monotonic()
    with pytest.raises(ExecutorReservationError) as refused:
        stage.reserve(4, LONG_BOUND_S)
    assert time.monotonic() - started < 5.0, "refused before the bound, not after it"
    message = str(refused.value)
    assert "parallelism 4" in message
    assert "local[3] has 3" in message
    assert "local[4]" in message, "what the user can do"
    assert (refused.value.asked, refused.value.registered) == (4, 3)
    stage.release_surplus(1)  # nothing to give back: no error either


def test_a_thread_stage_runs_any_parallelism_and_holds_nothing_to_release() -> None:
    stage = ThreadStage()
    stage.reserve(64, 0.0)
    stage.release_surplus(1)
