"""Runs a job's tasks beside its checkpoint coordinator, so neither outlives the other's failure.

The tasks block (threads in-process, or a Spark job), the coordinator is
asyncio. A bounded job ends only after its last checkpoint completes, so tasks
whose coordinator died would wait forever: a coordinator failure cancels them.
A task failure ends the run at once, with the task's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lockgate.runtime.coordination.coordinator import CheckpointCoordinator


async def run_beside_coordinator(
    coordinator: CheckpointCoordinator,
    run_tasks: Callable[[], None],
    cancel_tasks: Callable[[], None],
) -> str | None:
    """Run `run_tasks` in a thread while `coordinator` runs (it must be started).
    Returns the stop-with-savepoint path, if the job was stopped with one."""
    tasks = asyncio.create_task(asyncio.to_thread(run_tasks), name="tasks")
    coordination = asyncio.create_task(coordinator.run(), name="coordinator")
    try:
        await asyncio.wait({tasks, coordination}, return_when=asyncio.FIRST_COMPLETED)
        if coordination.done() and coordination.exception() is not None:
            cancel_tasks()
            # The tasks' own error is only the echo of the cancellation.
            await asyncio.gather(tasks, return_exceptions=True)
            raise coordination.exception()  # type: ignore[misc]
        await tasks  # a task failure propagates from here
        return coordinator.stopped_with
    finally:
        coordination.cancel()
        await asyncio.gather(coordination, return_exceptions=True)
        if not tasks.done():
            cancel_tasks()
            await asyncio.gather(tasks, return_exceptions=True)
