"""Runs a job's tasks beside its checkpoint coordinator, so neither outlives the other's failure.

The tasks block (threads in-process, or a Spark job), the coordinator is
asyncio. A bounded job ends only after its last checkpoint completes, so tasks
whose coordinator died would wait forever: a coordinator failure cancels them.
A task failure ends the run at once, with the task's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from lockgate.runtime.coordination.coordinator import CheckpointCoordinator

log = logging.getLogger(__name__)

SETTLE_S = 10.0
"""How long a coordinator may take, after its tasks ended, to finish with their last checkpoint."""


async def run_beside_coordinator(
    coordinator: CheckpointCoordinator,
    run_tasks: Callable[[], None],
    cancel_tasks: Callable[[], None],
    stop_wait_s: float | None = None,
) -> str | None:
    """Run `run_tasks` in a thread while `coordinator` runs (it must be started).
    Returns the stop-with-savepoint path, if the job was stopped with one. Tasks
    cancelled when the run ends early get `stop_wait_s` to stop (None: as long as
    they take); past it their thread, a daemon, is left behind, saying so."""
    tasks = _in_a_thread(run_tasks)
    coordination = asyncio.create_task(coordinator.run(), name="coordinator")
    try:
        either: set[asyncio.Future[Any]] = {tasks, coordination}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if coordination.done() and coordination.exception() is not None:
            cancel_tasks()
            # The tasks' own error is only the echo of the cancellation.
            await _stopped(tasks, stop_wait_s)
            raise coordination.exception()  # type: ignore[misc]
        await tasks  # a task failure propagates from here
        if not coordination.done():
            # The tasks end as soon as the last checkpoint's completion reaches them,
            # which can be before the coordinator has finished with it: answering a
            # stop-with-savepoint's request, recording a bounded job's end. Cancelled
            # now, it would leave the requester unanswered and the stop unrecorded.
            await asyncio.wait({coordination}, timeout=SETTLE_S)
        return coordinator.stopped_with
    finally:
        coordination.cancel()
        await asyncio.gather(coordination, return_exceptions=True)
        if not tasks.done():
            cancel_tasks()
            await _stopped(tasks, stop_wait_s)


def _in_a_thread(run: Callable[[], None]) -> asyncio.Future[None]:
    """`run` in a daemon thread (not the loop's executor, whose threads `asyncio.run`
    and the interpreter's exit wait for), its outcome in the future returned."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return  # given up on (`_stopped`)
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def thread() -> None:
        error: BaseException | None = None
        try:
            run()
        except StopIteration as stop:
            # A future cannot hold a StopIteration (asyncio would hang): as PEP 479 does.
            error = RuntimeError(f"a task raised StopIteration: {stop!r}")
            error.__cause__ = stop
        except BaseException as failure:  # noqa: BLE001 - handed to the future
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=thread, name="tasks", daemon=True).start()
    return done


async def _stopped(tasks: asyncio.Future[None], wait_s: float | None) -> None:
    try:
        async with asyncio.timeout(wait_s):
            await asyncio.gather(asyncio.shield(tasks), return_exceptions=True)
    except TimeoutError:
        tasks.cancel()  # nobody reads its outcome: the thread's late one is dropped
        log.error(
            "the job's tasks did not stop within %.0f s of their cancellation (a task in the job's code "
            "that does not return?); their thread is left behind",
            wait_s,
        )
