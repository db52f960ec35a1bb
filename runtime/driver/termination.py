"""SIGTERM handled like Ctrl-C: Kubernetes stops a pod, and users stop a run, with
SIGTERM. Python's default ends the process at once, skipping the cleanup that
matters here — the embedded etcd left running, the Spark stage not cancelled.
Here it cancels the job's main task, as asyncio does on SIGINT: the stage is
cancelled, `finally` blocks run, and the next run restores the latest
completed checkpoint."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130  # the shell's convention for a process ended by a signal it handled


async def until_terminated(work: Awaitable[T]) -> T:
    """Await `work`; SIGTERM cancels it (CancelledError), as Ctrl-C would."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # we are awaited inside a task
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
