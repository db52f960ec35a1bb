"""Bounded waiting for a condition another task makes true.

Polling stands in for an event the code under test does not expose; the
deadline turns a missed condition into a failure that says what was awaited
instead of a hung suite.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
        await asyncio.sleep(0.01)


async def eventually_true(
    condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10.0
) -> None:
    """`eventually` for a condition that must itself be awaited (a read from etcd)."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
        await asyncio.sleep(0.1)
