"""A real etcd with authentication on, as a production etcd runs: a root user
made and auth enabled the way `etcdctl user add root && etcdctl auth enable` do."""

from __future__ import annotations

from dataclasses import replace

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
