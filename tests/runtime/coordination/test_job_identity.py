"""Each job's etcd user reaches its own keys and no other job's, on a real etcd
with authentication on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.job_identity import JobIdentity, grant, new_password, revoke
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import Delete, KeyAbsent, Put

from tests.etcd_auth import as_user

A, B = JobKeys("team-a", "orders"), JobKeys("team-b", "orders")


@pytest_asyncio.fixture
async def root(root_config: EtcdConfig) -> AsyncIterator[Etcd]:
    async with Etcd(root_config) as etcd:
        yield etcd


async def _job_config(root: Etcd, keys: JobKeys, password: str | None = None) -> EtcdConfig:
    identity = JobIdentity(keys)
    password = password or new_password()
    await grant(root, identity, password)
    return as_user(root.config, identity.name, password)


async def test_a_job_reaches_its_own_keys_and_no_other_jobs(root: Etcd) -> None:
    config_a, config_b = await _job_config(root, A), await _job_config(root, B)
    async with Etcd(config_b) as b:
        await b.put(B.root + b"status", b"b's")
    async with Etcd(config_a) as a:
        # What a job does with its own keys: writes, reads, leases, transactions, watches.
        lease = await a.grant_lease(5)
        await a.put(A.root + b"status", b"a's", lease=lease)
        assert await a.transaction([KeyAbsent(A.launch)], [Put(A.launch, b"1")])
        assert [k for k, _ in await a.get_prefix(A.root)] == [A.launch, A.root + b"status"]
        watch = a.watch_prefix(A.root, 1)
        assert (await asyncio.wait_for(anext(watch), 5)).key.startswith(A.root)
        await watch.aclose()
        await a.revoke_lease(lease)
        await a.delete_prefix(A.root)
        # And with the other job's, or with every job's of a namespace: refused, named.
        other = B.root + b"status"
        attempts = {
            "get": a.get(other),
            "put": a.put(other, b"a was here"),
            "delete": a.delete(other),
            "delete_prefix": a.delete_prefix(B.root),
            "get_prefix": a.get_prefix(b"/lockgate/team-a/"),
            "transaction": a.transaction([], [Delete(other)]),
        }
        for operation, attempt in attempts.items():
            with pytest.raises(EtcdAccessError) as refused:
                await attempt
            assert "'lockgate/team-a/orders'" in str(refused.value), operation
            assert f"may not {operation}" in str(refused.value)
        with pytest.raises(EtcdAccessError, match=r"/lockgate/team-b/orders/status"):
            await a.get(other)
    async with Etcd(config_b) as b:
        assert await b.get(other) == b"b's"


async def test_a_job_of_the_same_name_in_a_namespace_whose_name_prefixes_it_stays_out(root: Etcd) -> None:
    """Role ranges are byte ranges: `/lockgate/team-a/` must not cover `/lockgate/team-ab/`."""
    near = JobKeys("team", "a")  # /lockgate/team/a/ is a prefix of no other job's keys...
    nearer = JobKeys("team", "ab")  # ...and /lockgate/team/ab/ is not under /lockgate/team/a/
    config = await _job_config(root, near)
    await root.put(nearer.root + b"status", b"theirs")
    async with Etcd(config) as etcd:
        with pytest.raises(EtcdAccessError):
            await etcd.get(nearer.root + b"status")


async def test_a_new_launchs_password_locks_out_every_earlier_launch(root: Etcd) -> None:
    first = await _job_config(root, A)
    async with Etcd(first) as earlier:
        await earlier.put(A.status, b"launch 1")
        await _job_config(root, A)  # the next launch: a new password for the same user
        with pytest.raises(EtcdAccessError, match="refused user 'lockgate/team-a/orders'"):
            await earlier.put(A.status, b"launch 1, still")
    assert await root.get(A.status) == b"launch 1"


async def test_a_removed_job_cannot_authenticate_and_its_role_is_gone(root: Etcd) -> None:
    config = await _job_config(root, A)
    await revoke(root, JobIdentity(A))
    await revoke(root, JobIdentity(A))  # what is gone stays gone: a retried deletion passes
    with pytest.raises(EtcdAccessError, match="authentication failed"):
        async with Etcd(config):
            pass


async def test_an_operator_without_etcds_root_role_is_told_what_to_grant(root: Etcd) -> None:
    config = await _job_config(root, A)  # a user that is not root
    async with Etcd(config) as not_root:
        with pytest.raises(EtcdAccessError, match=r"may not manage .*grant-role USER root"):
            await grant(not_root, JobIdentity(B), new_password())


async def test_a_job_authenticates_again_when_etcd_forgets_its_token(
    root: Etcd, own_etcd: EtcdServer
) -> None:
    """etcd keeps simple tokens in memory: a restart (or a leader change) forgets
    them, and the gRPC channel reconnects underneath with the old one."""
    config = await _job_config(root, A)
    async with Etcd(config) as etcd:
        await etcd.put(A.status, b"before")
        own_etcd.restart()
        await etcd.put(A.status, b"after")  # before the fix: UnauthenticatedError, invalid auth token
        assert await etcd.get(A.status) == b"after"


async def test_a_wrong_password_or_an_etcd_without_auth_is_named_not_called_unreachable(
    root: Etcd, tmp_path: Path
) -> None:
    config = await _job_config(root, A)
    with pytest.raises(EtcdAccessError, match="refused user 'lockgate/team-a/orders': authentication failed"):
        async with Etcd(replace(config, password="guess")):
            pass
    plain = EtcdServer(tmp_path / "plain")
    plain.start()
    try:
        with pytest.raises(EtcdAccessError, match="authentication disabled"):
            async with Etcd(replace(config, endpoints=(plain.endpoint,))):
                pass
    finally:
        plain.stop()
