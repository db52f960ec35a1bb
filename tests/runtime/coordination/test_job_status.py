"""The `status` key against a real etcd: a heartbeat that dies with its driver,
an outcome that outlives it."""

from __future__ import annotations

from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_status import StatusHeartbeat, read_status
from lockgate.runtime.coordination.keys import JobKeys

from tests.polling import eventually_true


async def test_a_running_job_beats_and_a_lost_one_disappears(etcd: Etcd, keys: JobKeys) -> None:
    heartbeat = StatusHeartbeat(etcd, keys, parallelism=3, restarts=lambda: 2, ttl_s=3)
    await heartbeat.start()
    first = await read_status(etcd, keys)
    assert first is not None
    assert (first.state, first.parallelism, first.restarts) == ("running", 3, 2)

    async def beaten() -> bool:
        status = await read_status(etcd, keys)
        assert status is not None, "a live heartbeat keeps its lease"
        return status.at_ms > first.at_ms

    await eventually_true(beaten, "the heartbeat advances", timeout_s=5)
    heartbeat.abandon()  # the driver is killed: nobody refreshes the lease

    async def gone() -> bool:
        return await read_status(etcd, keys) is None

    await eventually_true(gone, "the lost driver's running status expires with its lease")


async def test_the_outcome_outlives_the_lease(etcd: Etcd, keys: JobKeys) -> None:
    heartbeat = StatusHeartbeat(etcd, keys, parallelism=2, restarts=lambda: 1, ttl_s=3)
    await heartbeat.start()
    await heartbeat.finish("stopped", savepoint="file:///s/savepoint-x")
    # finish() revoked the heartbeat's lease: had the outcome been bound to it, it would be gone now.
    status = await read_status(etcd, keys)
    assert status is not None
    assert (status.state, status.savepoint, status.restarts) == ("stopped", "file:///s/savepoint-x", 1)


class LeaseLapsesAfterRefresh(Etcd):
    """Real etcd; the first refresh's lease is gone before the beat's put, as when
    the driver paused between the two past the lease's TTL."""

    lapsed = False

    async def refresh_lease(self, lease_id: int) -> int:
        ttl = await super().refresh_lease(lease_id)
        if not self.lapsed:
            self.lapsed = True
            await self.revoke_lease(lease_id)
        return ttl


async def test_the_heartbeat_goes_on_when_its_lease_lapses_between_refresh_and_put(
    etcd: Etcd, keys: JobKeys
) -> None:
    async with LeaseLapsesAfterRefresh(etcd.config) as lapsing:
        heartbeat = StatusHeartbeat(lapsing, keys, parallelism=2, restarts=lambda: 0, ttl_s=3)
        await heartbeat.start()
        first = await read_status(etcd, keys)
        assert first is not None

        async def beaten_after_the_lapse() -> bool:
            status = await read_status(etcd, keys)
            return lapsing.lapsed and status is not None and status.at_ms > first.at_ms

        await eventually_true(beaten_after_the_lapse, "the heartbeat beats under a new lease", timeout_s=10)
        await heartbeat.finish("finished")
