"""A test's asyncio tasks end with it, or the test fails naming them.

pytest-asyncio closes a test's event loop by cancelling every task still
pending once and waiting for them all, without a bound: one task that does not
end on that cancellation (it swallows it, or awaits in its clean-up an etcd a
fault left silent) hangs the whole run until the per-test timeout kills it, and
the report names no test. This guard is set up first and torn down last, just
before the loop closes: it cancels what the test left running and, if a task
has not ended within the bound Lockgate's own clean-up promises, fails the test
with that task's stack — then cancels it again and again, so that the run goes
on to the next test instead of hanging.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lockgate.runtime.coordination.cancellation import CANCEL_WAIT_S

# A cancelled task's clean-up is bounded by CANCEL_WAIT_S per step; beyond
# twice that (and a margin for a loaded machine) it does not end. The guard's own
# test sets a short bound: what it shows does not depend on the bound's length.
TASK_END_BOUND_S = float(os.environ.get("LOCKGATE_TEST_TASK_END_BOUND_S", 2 * CANCEL_WAIT_S + 5))
RECANCEL_EVERY_S = 0.5
RECANCEL_FOR_S = 30.0


def _running(this: asyncio.Task[object] | None) -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task is not this and not task.done()]


def _stacks(tasks: list[asyncio.Task[object]]) -> str:
    out = io.StringIO()
    for task in tasks:
        task.print_stack(file=out)
    return out.getvalue()


async def _cancel_again_and_again(tasks: list[asyncio.Task[object]]) -> None:
    for _ in range(int(RECANCEL_FOR_S / RECANCEL_EVERY_S)):
        tasks = [task for task in tasks if not task.done()]
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=RECANCEL_EVERY_S)


@pytest_asyncio.fixture
async def tasks_end_with_their_test() -> AsyncIterator[None]:
    yield
    this = asyncio.current_task()
    left = _running(this)
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=TASK_END_BOUND_S)
    stuck = [task for task in left if not task.done()]
    if not stuck:
        return
    report = _stacks(stuck)
    await _cancel_again_and_again(stuck)
    pytest.fail(
        f"{len(stuck)} task(s) the test left running did not end within {TASK_END_BOUND_S:.0f} s "
        f"of being cancelled (closing the event loop would have waited for them forever):\n{report}",
        pytrace=False,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every coroutine test the guard, as its first fixture."""
    for item in items:
        if isinstance(item, pytest.Function) and asyncio.iscoroutinefunction(item.obj):
            item.fixturenames.insert(0, "tasks_end_with_their_test")
