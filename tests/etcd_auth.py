"""A real etcd with authentication on, as a production etcd runs: a root user
made and auth enabled the way `etcdctl user add root && etcdctl auth enable` do.
A pytest plugin (the root conftest loads it): fixtures `auth_etcd`, `root_config`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from aetcd import rpc
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer

ROOT_PASSWORD = "root-password-for-tests"


async def enable_auth(server: EtcdServer) -> EtcdConfig:
    """Turn authentication on in `server`; the root user's config."""
    anonymous = EtcdConfig((server.endpoint,))
    async with Etcd(anonymous) as etcd:
        await etcd.auth("UserAdd", rpc.AuthUserAddRequest(name="root", password=ROOT_PASSWORD))
        await etcd.auth("UserGrantRole", rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await etcd.auth("AuthEnable", rpc.AuthEnableRequest())
    return replace(anonymous, username="root", password=ROOT_PASSWORD)


def as_user(config: EtcdConfig, user: str, password: str) -> EtcdConfig:
    return replace(config, username=user, password=password, retries=2)


@pytest.fixture
def auth_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of the test's own (to restart), authentication not yet on."""
    server = EtcdServer(tmp_path / "auth-etcd")
    server.start()
    yield server
    server.stop()


@pytest_asyncio.fixture
async def root_config(auth_etcd: EtcdServer) -> EtcdConfig:
    """`auth_etcd` with authentication on; the root user's config."""
    return await enable_auth(auth_etcd)
