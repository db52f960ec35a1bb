"""A real etcd with authentication on, as a production etcd runs: a root user
made and auth enabled the way `etcdctl user add root && etcdctl auth enable` do."""

from __future__ import annotations

from dataclasses import replace

from lockgate.runtime.coordination import etcd_auth
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer

ROOT_PASSWORD = "root-password-for-tests"


async def enable_auth(server: EtcdServer) -> EtcdConfig:
    """Turn authentication on in `server`; the root user's config."""
    root = EtcdConfig((server.endpoint,), username=etcd_auth.ROOT, password=ROOT_PASSWORD)
    assert await etcd_auth.enable_auth(root), "auth was off"
    return root


def as_user(config: EtcdConfig, user: str, password: str) -> EtcdConfig:
    return replace(config, username=user, password=password, retries=2)
