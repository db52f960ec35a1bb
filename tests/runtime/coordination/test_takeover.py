"""Nothing that decides whether a driver is gone rests on a lease, which any etcd
user can keep alive: what etcd's auth isolates between two jobs' users and what it
does not; a successor that takes over from a dead, paused or live holder; the
operator's reading of a hung driver's status. Real etcd with auth enabled, each
job with its own user as the operator makes them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import aetcd
import aetcd.exceptions
import pytest
import pytest_asyncio
from aetcd import rpc
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.errors import CoordinatorConflictError
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError, EtcdConfig
from lockgate.runtime.coordination.job_identity import JobIdentity, grant
from lockgate.runtime.coordination.job_status import StatusHeartbeat, StatusReader, read_status
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import Put
from lockgate.runtime.coordination.leadership import Leadership
from lockgate.runtime.coordination.records import CoordinatorRecord, decode, encode
from lockgate.runtime.engine.control import CheckpointControl

from tests.etcd_auth import as_user
from tests.polling import eventually, eventually_true

TEAM_A, TEAM_B = JobKeys("team-a", "orders"), JobKeys("team-b", "orders")
TTL_S = 2


async def _user(root: EtcdConfig, keys: JobKeys) -> EtcdConfig:
    """The job's own etcd user, as the operator grants it."""
    password = f"password-of-{keys.namespace}"
    async with Etcd(root) as etcd:
        await grant(etcd, JobIdentity(keys), password)
    return as_user(root, JobIdentity(keys).name, password)


@pytest_asyncio.fixture
async def team_a(root_config: EtcdConfig) -> EtcdConfig:
    return await _user(root_config, TEAM_A)


@pytest_asyncio.fixture
async def team_b(root_config: EtcdConfig) -> AsyncIterator[Etcd]:
    async with Etcd(await _user(root_config, TEAM_B)) as etcd:
        yield etcd


@contextlib.asynccontextmanager
async def _raw_client(config: EtcdConfig) -> AsyncIterator[aetcd.Client]:
    """An etcd client as another tenant would write it: the lease API as etcd has it."""
    endpoint = urlparse(config.endpoints[0])
    assert endpoint.hostname is not None
    assert endpoint.port is not None
    async with aetcd.Client(
        endpoint.hostname, endpoint.port, username=config.username, password=config.password
    ) as client:
        yield client


async def _leases(client: aetcd.Client) -> list[int]:
    reply = await client.leasestub.LeaseLeases(rpc.LeaseLeasesRequest(), metadata=client.metadata)
    return [lease.ID for lease in reply.leases]


@contextlib.asynccontextmanager
async def _keeping_every_lease_alive(config: EtcdConfig) -> AsyncIterator[None]:
    """Another tenant that keeps every lease in etcd alive, as its own user."""

    async def attack(client: aetcd.Client) -> None:
        while True:
            for lease in await _leases(client):
                with contextlib.suppress(aetcd.exceptions.ClientError):
                    await client.refresh_lease(lease)
            await asyncio.sleep(TTL_S / 5)  # the attacker's own pace, well inside the TTL

    async with _raw_client(config) as client:
        attacker = asyncio.create_task(attack(client))
        try:
            yield
        finally:
            attacker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attacker


async def _record(etcd: Etcd, keys: JobKeys) -> CoordinatorRecord | None:
    data = await etcd.get(keys.coordinator)
    return None if data is None else decode(CoordinatorRecord, data)


async def test_etcd_auth_isolates_keys_but_not_leases(team_a: EtcdConfig, team_b: Etcd) -> None:
    """What the docs' security model says of etcd's auth, on this etcd."""
    lease = await team_b.grant_lease(60)
    await team_b.put(TEAM_B.coordinator, b"team-b's record", lease=lease)
    async with Etcd(team_a) as etcd_a, _raw_client(team_a) as client_a:
        with pytest.raises(EtcdAccessError, match="may not get key"):
            await etcd_a.get(TEAM_B.coordinator)
        # Leases are not: team-a lists team-b's, keeps it alive, and (before etcd
        # 3.4.26 / 3.5.9, which check read permission on the keys) reads its keys' names.
        assert lease in await _leases(client_a)
        assert await etcd_a.refresh_lease(lease) == 60
        status = await client_a.status()
        version = tuple(int(part) for part in status.version.split(".")[:3])
        if version < (3, 4, 26) or (3, 5, 0) <= version < (3, 5, 9):
            info = await client_a.get_lease_info(lease, keys=True)
            assert list(info.keys) == [TEAM_B.coordinator]
        # Revoking a lease takes write permission on every key it holds; a key goes
        # on a lease only if the writer may write the lease's keys too.
        with pytest.raises(EtcdAccessError, match="may not revoke_lease"):
            await etcd_a.revoke_lease(lease)
        with pytest.raises(EtcdAccessError, match="may not put"):
            await etcd_a.put(TEAM_A.coordinator, b"team-a's record", lease=lease)
        # A lease that holds no key yet, anyone may revoke.
        empty = await team_b.grant_lease(60)
        await etcd_a.revoke_lease(empty)
        assert empty not in await _leases(client_a)
    assert await team_b.get(TEAM_B.coordinator) == b"team-b's record"


# A driver's coordinator, in a process of its own, to be killed holding the job.
_DRIVER = """
import asyncio, os, sys
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.leadership import Leadership

async def main():
    config = EtcdConfig((sys.argv[1],), username=sys.argv[2], password=os.environ["PASSWORD"])
    async with Etcd(config) as etcd:
        leadership = Leadership(etcd, JobKeys(sys.argv[3], sys.argv[4]), int(sys.argv[5]))
        await leadership.acquire()
        print(leadership.record.coordinator_id, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def _killed_driver(config: EtcdConfig, keys: JobKeys) -> str:
    """Starts a coordinator in a process of its own and kills it (SIGKILL) once it
    holds the job: its record and lease are left behind. Its coordinator id."""
    assert config.username is not None
    assert config.password is not None
    driver = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _DRIVER,
        config.endpoints[0],
        config.username,
        keys.namespace,
        keys.job,
        str(TTL_S),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PASSWORD": config.password},
    )
    try:
        assert driver.stdout is not None
        coordinator_id = (await asyncio.wait_for(driver.stdout.readline(), 30)).decode().strip()
    finally:
        driver.kill()
        await driver.wait()
    assert coordinator_id, "the driver never held the job"
    return coordinator_id


async def test_a_replacement_takes_over_while_another_tenant_keeps_the_killed_drivers_lease_alive(
    team_a: EtcdConfig, team_b: Etcd
) -> None:
    killed = await _killed_driver(team_b.config, TEAM_B)
    async with _keeping_every_lease_alive(team_a):
        replacement = Leadership(team_b, TEAM_B, TTL_S)
        started = time.monotonic()
        await replacement.acquire(wait_s=5 * TTL_S)
        took_s = time.monotonic() - started
    try:
        assert took_s < 2 * TTL_S, f"the replacement took over after {took_s:.1f} s, not within a TTL"
        record = await _record(team_b, TEAM_B)
        assert record is not None
        assert record.coordinator_id == replacement.record.coordinator_id != killed
        assert record.launch == 2
    finally:
        await replacement.release()


async def _beaten(etcd: Etcd, keys: JobKeys, beat: int) -> None:
    async def landed() -> bool:
        return await etcd.get(keys.coordinator_heartbeat) == str(beat).encode()

    await eventually_true(landed, f"heartbeat {beat} reached etcd")


async def test_a_live_holder_is_never_displaced_and_a_silent_one_is_replaced_after_a_ttl(
    team_a: EtcdConfig, team_b: Etcd, root_config: EtcdConfig
) -> None:
    clock = ManualClock()
    ttl_ms = 10 * 1000  # the lease's real TTL too: long enough that etcd never expires it here
    holder = Leadership(team_b, TEAM_B, ttl_ms // 1000, clock=clock)
    await holder.acquire()
    task = CheckpointControl(
        as_user(root_config, JobIdentity(TEAM_B).name, "password-of-team-b"), TEAM_B, 0, 1
    )
    task.start()
    successor = Leadership(team_b, TEAM_B, ttl_ms // 1000, clock=clock)
    taking = asyncio.create_task(successor.acquire(wait_s=3600))
    try:
        async with _keeping_every_lease_alive(team_a):
            # The holder's keep-alive and the successor's wait both sleep on the clock.
            await eventually(lambda: clock.sleepers == 2, "the holder beats and the successor waits")
            for beat in range(1, 31):  # ten TTLs
                clock.advance(ttl_ms // 3 + 1)
                await _beaten(team_b, TEAM_B, beat)
            assert not taking.done(), "a holder that beats was displaced"
            assert not holder.lost.is_set()
            assert task.deposed is None, "a heartbeat deposed the launch's tasks"

            holder.abandon()  # stops beating, its lease kept alive by team-a
            await eventually(lambda: clock.sleepers == 1, "only the successor waits")
            clock.advance(ttl_ms)
            await asyncio.wait_for(taking, 10)
        record = await _record(team_b, TEAM_B)
        assert record is not None
        assert record.launch == 2 == successor.launch
        await eventually(lambda: task.deposed is not None, "the launch's tasks are deposed")
        assert task.deposed == "launch 2 has replaced launch 1"
    finally:
        task.close()
        taking.cancel()
        await successor.release()
        await holder.release()


async def test_a_paused_holder_that_resumes_is_fenced_and_writes_nothing(
    team_a: EtcdConfig, team_b: Etcd
) -> None:
    holder_clock, successor_clock = ManualClock(), ManualClock()
    holder = Leadership(team_b, TEAM_B, 10, clock=holder_clock)
    await holder.acquire()
    successor = Leadership(team_b, TEAM_B, 10, clock=successor_clock)
    async with _keeping_every_lease_alive(team_a):
        # The holder is paused: its clock (and so its keep-alive) stands still.
        taking = asyncio.create_task(successor.acquire(wait_s=3600))
        await eventually(lambda: successor_clock.sleepers == 1, "the successor waits")
        successor_clock.advance(10_000)
        await asyncio.wait_for(taking, 10)
    try:
        holder_clock.advance(10_000 // 3 + 1)  # it resumes, and beats
        await asyncio.wait_for(holder.lost.wait(), 10)
        assert not await team_b.transaction([holder.guard], [Put(TEAM_B.latest, b"7")])
        assert await team_b.get(TEAM_B.latest) is None
        assert await team_b.get(TEAM_B.coordinator_heartbeat) == b"0", "the paused holder's beat landed"
        record = await _record(team_b, TEAM_B)
        assert record is not None
        assert record.coordinator_id == successor.record.coordinator_id
        await holder.release()  # deletes nothing of its successor's
        assert await _record(team_b, TEAM_B) == record
    finally:
        await successor.release()


async def test_a_successor_without_a_wait_is_refused_and_a_release_deletes_the_record(team_b: Etcd) -> None:
    holder = Leadership(team_b, TEAM_B, TTL_S, clock=ManualClock())
    await holder.acquire()
    try:
        with pytest.raises(CoordinatorConflictError, match=r"within 2 s of its last heartbeat"):
            await Leadership(team_b, TEAM_B, TTL_S, clock=ManualClock()).acquire(wait_s=0)
    finally:
        await holder.release()
    assert await team_b.get(TEAM_B.coordinator) is None
    assert await team_b.get(TEAM_B.coordinator_heartbeat) is None


async def test_a_hung_drivers_running_status_reads_as_lost_while_another_tenant_keeps_its_lease(
    team_a: EtcdConfig, team_b: Etcd
) -> None:
    heartbeat = StatusHeartbeat(team_b, TEAM_B, parallelism=2, restarts=lambda: 0, ttl_s=TTL_S)
    await heartbeat.start()
    heartbeat.abandon()  # the driver hangs: it beats no more
    clock = ManualClock()
    operator = StatusReader(team_b, ttl_s=TTL_S, clock=clock)
    async with _keeping_every_lease_alive(team_a):
        first = await operator.read(TEAM_B)
        assert first is not None
        assert first.state == "running"
        clock.advance(TTL_S * 1000 - 1)
        assert await operator.read(TEAM_B) == first
        clock.advance(1)
        assert await operator.read(TEAM_B) is None, (
            "a beat that stood still for the TTL still reads as running"
        )
        assert await read_status(team_b, TEAM_B) == first, "the lease was kept alive all along"
        # An outcome is kept, never read as a beat that stood still.
        await heartbeat.finish("finished")
        finished = await operator.read(TEAM_B)
        assert finished is not None
        assert finished.state == "finished"


async def test_a_record_without_a_heartbeat_is_waited_out_on_its_lease_alone(team_b: Etcd) -> None:
    """A driver of a Lockgate from before heartbeats holds the job by its lease alone:
    its record cannot show that it is alive, so no silence replaces it."""
    lease = await team_b.grant_lease(60)
    earlier = CoordinatorRecord("an-earlier-lockgate", "host", 1, 0, launch=1)
    await team_b.put(TEAM_B.coordinator, encode(earlier), lease=lease)
    await team_b.put(TEAM_B.launch, b"1")
    clock = ManualClock()
    successor = Leadership(team_b, TEAM_B, TTL_S, clock=clock)
    taking = asyncio.create_task(successor.acquire(wait_s=10 * TTL_S))
    await eventually(lambda: clock.sleepers == 1, "the successor waits")
    clock.advance(10 * TTL_S * 1000)
    with pytest.raises(CoordinatorConflictError, match="an-earlier-lockgate"):
        await asyncio.wait_for(taking, 10)
    await team_b.revoke_lease(lease)  # that driver stops: its lease ends
    await successor.acquire()
    try:
        assert successor.launch == 2
    finally:
        await successor.release()


class FirstLeaseRevokedByAnotherTenant(Etcd):
    """Real etcd, as team-b; team-a revokes the first lease granted before it holds
    a key, as any etcd user may (one that holds keys needs write permission on them)."""

    attacker: Etcd
    revoked: int | None = None

    async def grant_lease(self, ttl_s: int) -> int:
        lease = await super().grant_lease(ttl_s)
        if self.revoked is None:
            self.revoked = lease
            await self.attacker.revoke_lease(lease)
        return lease


async def test_a_coordinator_whose_new_lease_another_tenant_revoked_takes_the_job_on_another(
    team_a: EtcdConfig, team_b: Etcd
) -> None:
    async with Etcd(team_a) as attacker, FirstLeaseRevokedByAnotherTenant(team_b.config) as etcd:
        etcd.attacker = attacker
        leadership = Leadership(etcd, TEAM_B, TTL_S)
        await leadership.acquire()
        try:
            assert etcd.revoked is not None
            assert leadership.lease_id != etcd.revoked
            assert leadership.launch == 1
            assert await etcd.get(TEAM_B.coordinator) is not None
        finally:
            await leadership.release()
