"""Bounded waiting for a condition another task makes true.

Polling stands in for an event the code under test does not expose; the
deadline turns a missed condition into a failure that says what was awaited
instead of a hung suite.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually_true(
    condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10.0, poll_s: float = 0.1
) -> None:
    """Wait until `condition` (awaited: e.g. a read from etcd) holds, at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
        await asyncio.sleep(poll_s)


async def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """`eventually_true` for a condition that is a plain check of local state."""

    async def holds() -> bool:
        return condition()

    await eventually_true(holds, what, timeout_s, poll_s=0.01)


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = 10.0, poll_s: float = 0.01
) -> None:
    """`eventually` for a test on threads, without an event loop."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
        time.sleep(poll_s)
