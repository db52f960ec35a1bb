"""A periodic checkpoint that aborts is reported once, as the coordinator's warning:
asyncio does not add "Future exception was never retrieved" with the abort's
traceback when its future is collected (nobody awaits a periodic checkpoint)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger

from tests.polling import eventually
from tests.runtime.coordination.running_job import Job


class Aborts:
    """The coordinator's listener, counting aborted checkpoints."""

    def __init__(self) -> None:
        self.count = 0

    def completed(self, checkpoint: CompletedCheckpoint) -> None:
        pass

    def aborted(self, trigger: Trigger, reason: str) -> None:
        self.count += 1


async def test_an_aborted_periodic_checkpoint_leaves_no_unretrieved_exception(
    job: Job, caplog: pytest.LogCaptureFixture
) -> None:
    job.subtasks[0].decline = "source partition unreadable"
    aborts = Aborts()
    config = CheckpointConfig(interval_s=0.05, timeout_s=10, tolerable_failures=100)
    coordinator = job.coordinator(config, listener=aborts)
    await coordinator.start()
    with caplog.at_level(logging.WARNING):
        running = asyncio.create_task(coordinator.run())
        try:
            await eventually(lambda: aborts.count >= 3, "three periodic checkpoints aborted")
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await coordinator.close()
        gc.collect()  # asyncio reports an unretrieved exception as its future is collected
        await asyncio.sleep(0)
    assert "declined: source partition unreadable" in caplog.text
    assert "never retrieved" not in caplog.text, caplog.text
