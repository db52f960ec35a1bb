"""SIGTERM and SIGINT both cancel the job's main task. Kubernetes stops a pod with
SIGTERM, whose Python default ends the process at once; users stop a run with
Ctrl-C, whose handler PySpark replaces with one that raises KeyboardInterrupt
wherever the main thread happens to be — inside the event loop, a gRPC call to
etcd, a lock — and asyncio only installs its own when the default is in place.
Cancelling the task instead gives one orderly path: the Spark stage is
cancelled, `finally` blocks run, the embedded etcd stops, and the next run
restores the latest completed checkpoint."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130  # the shell's convention for a process ended by a signal it handled

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def until_terminated(work: Awaitable[T]) -> T:
    """Await `work`; SIGTERM or SIGINT cancels it (CancelledError)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # we are awaited inside a task
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, task.cancel)
    try:
        return await work
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
