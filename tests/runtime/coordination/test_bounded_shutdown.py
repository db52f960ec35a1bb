"""Shutting down never waits without a bound, and a cancellation is never swallowed:
a driver whose clean-up hangs goes on holding its lease and beating `running`, so
neither the operator nor a replacement can act. Against a real etcd, paused."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from lockgate.runtime.coordination.cancellation import CANCEL_WAIT_S, bounded, run_with_bounded_shutdown
from lockgate.runtime.coordination.coordinator import CheckpointConfig, JobPlan
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys

from tests.polling import eventually
from tests.runtime.coordination.running_job import Job

# Shutdown's clean-up steps (the coordinator's loops, then its lease) each wait
# at most CANCEL_WAIT_S; beyond that and a margin, it hung.
SHUTDOWN_BOUND_S = 2 * CANCEL_WAIT_S + 2


@pytest_asyncio.fixture
async def paused_job(own_etcd: EtcdServer, keys: JobKeys, tmp_path: Path) -> AsyncIterator[Job]:
    async with Etcd(EtcdConfig((own_etcd.endpoint,))) as etcd:
        yield Job(etcd, keys, tmp_path, JobPlan({"source": 1, "count": 1}, 8))


async def test_closing_a_coordinator_while_etcd_is_paused_ends_within_a_bound(
    paused_job: Job, own_etcd: EtcdServer
) -> None:
    coordinator = paused_job.coordinator(CheckpointConfig(interval_s=None))
    await coordinator.start()
    own_etcd.pause()
    started = time.monotonic()
    await asyncio.wait_for(coordinator.close(), 60)
    took = time.monotonic() - started
    assert took < SHUTDOWN_BOUND_S, f"close() took {took:.1f} s with etcd paused"


async def test_a_watch_cancelled_while_etcd_is_paused_ends_at_once(
    paused_job: Job, own_etcd: EtcdServer
) -> None:
    events: list[object] = []

    async def follow() -> None:
        async for event in paused_job.store.watch_prefix(paused_job.keys.root, 1):
            events.append(event)

    watching = asyncio.create_task(follow())
    await paused_job.store.put(paused_job.keys.root + b"x", b"1")
    await eventually(lambda: bool(events), "the watch delivered an event: it is established")
    own_etcd.pause()
    watching.cancel()
    started = time.monotonic()
    done, _ = await asyncio.wait({watching}, timeout=60)
    took = time.monotonic() - started
    assert done, "the cancelled watch never ended"
    assert watching.cancelled(), "the watch swallowed its cancellation"
    assert took < CANCEL_WAIT_S, f"the cancelled watch took {took:.1f} s to end"


async def test_a_coordinator_cut_off_from_etcd_knows_its_lease_is_gone_within_its_ttl(
    paused_job: Job, own_etcd: EtcdServer
) -> None:
    """It must stop coordinating once etcd may have expired its lease, not when an
    etcd call finally gives up (retries and timeouts add up to tens of seconds)."""
    coordinator = paused_job.coordinator(CheckpointConfig(interval_s=None), lease_ttl_s=2)
    await coordinator.start()
    try:
        own_etcd.pause()
        started = time.monotonic()
        await asyncio.wait_for(coordinator.leadership.lost.wait(), 60)
        took = time.monotonic() - started
    finally:
        own_etcd.resume()
        await coordinator.close()
    assert took <= 2 + 1, f"the lease was declared lost {took:.1f} s after etcd went silent (TTL 2 s)"


async def test_clean_up_that_resists_its_cancellation_is_left_behind_at_the_bound() -> None:
    """`bounded` is the bound of every clean-up step; asyncio.wait_for, on its
    timeout, waits for the cancelled work to finish, which a gRPC call to a silent
    peer (or any clean-up that catches its cancellation) may never do."""
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # as clean-up that retries through its cancellation does

    started = time.monotonic()
    assert await bounded(stubborn(), "stubborn clean-up", timeout_s=0.2) is None
    assert time.monotonic() - started < 2
    release.set()  # lets the abandoned work end before the test's loop closes


async def test_watches_cancelled_the_moment_they_are_created_end(etcd: Etcd) -> None:
    """aetcd waits for a watch's creation with Python 3.11's `asyncio.wait_for`,
    which returns instead of raising when the creation completes as its task is
    cancelled: a coordinator closed just after it started (`lockgate run` refusing
    an earlier run's checkpoints) then waited forever for its watch loops."""

    async def watching(prefix: bytes, revision: int) -> None:
        async for _ in etcd.watch_prefix(prefix, revision):
            pass

    moments = random.Random(11)
    for attempt in range(300):
        _, revision = await etcd.get_prefix_at(b"/watched/")
        watches = [asyncio.create_task(watching(p, revision + 1)) for p in (b"/watched/a/", b"/watched/b/")]
        await asyncio.sleep(moments.choice([0, 0.0005, 0.001, 0.002, 0.003]))
        for watch in watches:
            watch.cancel()
        _, stuck = await asyncio.wait(watches, timeout=CANCEL_WAIT_S)
        assert not stuck, f"attempt {attempt}: a watch cancelled as it was created never ended"


def test_a_command_ends_although_work_it_left_behind_resists_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """asyncio.run cancels what is still running when the command's coroutine ends
    and waits for it without a bound: a `lockgate run` that had logged a watch left
    behind then never exited, and its embedded etcd and Spark JVM lived on with it."""
    release = threading.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    async def command() -> str:
        asyncio.get_running_loop().create_task(stubborn(), name="stuck watch")
        await asyncio.sleep(0)
        return "finished"

    started = time.monotonic()
    assert run_with_bounded_shutdown(command(), timeout_s=0.2) == "finished"
    assert time.monotonic() - started < 2
    assert "stuck watch did not stop" in caplog.text
    release.set()
