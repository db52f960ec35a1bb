"""A coordinator frozen whole, as SIGSTOP, a long GC pause or a stalled VM freezes a driver.

The coordinator runs on its own event loop in its own thread with its own etcd
client. Pausing blocks that loop: nothing of the coordinator runs, its lease
keepalive included, so the lease really expires while it is paused; resuming
lets it go on from exactly where it stopped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd

from tests.runtime.coordination.running_job import Job

T = TypeVar("T")


class PausableCoordinator:
    def __init__(self, job: Job, config: CheckpointConfig, lease_ttl_s: int = 2) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="paused-driver")
        self._thread.start()
        self._resumed = threading.Event()
        self._resumed.set()
        assert isinstance(job.store, Etcd), "pausing a coordinator pauses its etcd connection"
        self.etcd = Etcd(job.store.config)

        async def create() -> CheckpointCoordinator:
            await self.etcd.connect()
            return CheckpointCoordinator(
                self.etcd,
                job.keys,
                job.storage,
                job.plan,
                config,
                savepoint_dir=job.savepoint_dir,
                lease_ttl_s=lease_ttl_s,
            )

        self.coordinator = self.call(create())

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run `coroutine` on the coordinator's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def wait(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """`call` without blocking the caller's own event loop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)

    def pause_after(self, action: Callable[[], T]) -> asyncio.Future[T]:
        """Do `action` on the coordinator's loop, then freeze the loop before it runs
        anything else (a trigger queued but not yet published, say)."""
        self._resumed.clear()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        caller = asyncio.get_running_loop()

        def act_then_freeze() -> None:
            result = action()
            caller.call_soon_threadsafe(done.set_result, result)
            self._resumed.wait()

        self._loop.call_soon_threadsafe(act_then_freeze)
        return done

    def resume(self) -> None:
        self._resumed.set()

    def stop(self) -> None:
        self.resume()
        try:
            try:
                self.call(self.coordinator.close(release=False), timeout_s=10)
            except TimeoutError:

                async def dump() -> None:
                    for t in asyncio.all_tasks():
                        t.print_stack(limit=12)

                self.call(dump())
                raise
            self.call(self.etcd.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
