"""Cancelling asyncio work with a bound, without ever swallowing a cancellation.

A cancelled task that awaits something in its clean-up (a gRPC stream to a
silent or paused etcd, say) can take forever to finish; whoever waits for it
must not. And code that turns errors into retries must not turn the
`CancelledError` of its own cancellation into one: a retry loop that does keeps
a driver alive (and beating `running`) after it was told to stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long clean-up of one cancelled piece of work may take before it is left behind.
CANCEL_WAIT_S = 5.0


def raise_if_cancelling() -> None:
    """Re-raise the current task's pending cancellation: call it where an error
    that a cancellation may cause (a gRPC CANCELLED, say) is about to be retried."""
    if cancellation_requests():
        raise asyncio.CancelledError


def cancellation_requests() -> int:
    """How many times the current task has been asked to stop: read it before
    awaiting code that may swallow a cancellation, for `raise_if_cancelled_since`."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def raise_if_cancelled_since(requests: int) -> None:
    """Re-raise a cancellation of the current task requested after `requests` was
    read, which the code awaited since swallowed: Python 3.11's `asyncio.wait_for`
    returns its work's result instead when the work completes as it is cancelled
    (aetcd waits for a watch's creation so), and the task would then wait forever."""
    if cancellation_requests() > requests:
        raise asyncio.CancelledError


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`awaitable`'s result, or TimeoutError after `timeout_s`. Not `asyncio.wait_for`:
    in Python 3.11 that swallows a cancellation that comes as its work completes."""
    async with asyncio.timeout(timeout_s):
        return await awaitable


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[T]], what: str, timeout_s: float = CANCEL_WAIT_S
) -> None:
    """Cancel `tasks` and wait at most `timeout_s` for them to end. Those still
    running then are logged by name and left behind."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return
    _, stuck = await asyncio.wait(pending, timeout=timeout_s)
    if stuck:
        names = ", ".join(sorted(task.get_name() for task in stuck))
        log.error("%s: %s did not stop within %.0f s of being cancelled; left behind", what, names, timeout_s)


async def bounded(awaitable: Awaitable[T], what: str, timeout_s: float = CANCEL_WAIT_S) -> T | None:
    """`awaitable`'s result, or None (logged) if it takes longer than `timeout_s`:
    for clean-up that must not hold up a shutdown. Not `asyncio.wait_for`: on its
    timeout that waits for the cancelled work to end, which work that resists its
    cancellation (a gRPC call to a silent peer) never does. Such work is cancelled
    and left behind."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait([task], timeout=timeout_s)
    except asyncio.CancelledError:
        _leave_behind(task)  # our own cancellation: the work goes with it, unwaited
        raise
    if done:
        return task.result()
    _leave_behind(task)
    log.warning("%s took longer than %.0f s; gave up on it", what, timeout_s)
    return None


def _leave_behind(task: asyncio.Future[Any]) -> None:
    task.cancel()
    _LEFT_BEHIND.add(task)
    task.add_done_callback(_forget_left_behind)


# Work `bounded` gave up on, referenced until it ends (the loop keeps only weak
# references to tasks); its outcome is consumed there, not reported as unretrieved.
_LEFT_BEHIND: set[asyncio.Future[Any]] = set()


def _forget_left_behind(task: asyncio.Future[Any]) -> None:
    _LEFT_BEHIND.discard(task)
    if not task.cancelled():
        task.exception()


def run_with_bounded_shutdown(main: Coroutine[Any, Any, T], timeout_s: float = CANCEL_WAIT_S) -> T:
    """`asyncio.run(main)`, except that the work still running when `main` ends is
    given `timeout_s` to end after its cancellation, and what resists is logged and
    abandoned with the loop: asyncio.run waits for it without a bound, so one stuck
    gRPC call would keep a finished command (and its embedded etcd) alive forever."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
            loop.run_until_complete(cancel_and_wait(leftovers, "shutting down", timeout_s))
            loop.run_until_complete(bounded(loop.shutdown_asyncgens(), "closing generators", timeout_s))
            loop.run_until_complete(bounded(loop.shutdown_default_executor(), "joining threads", timeout_s))
        finally:
            loop.close()
