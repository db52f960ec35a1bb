"""Switching etcd's authentication on: etcd has no flag for it, so the first
client with the root password adds the user `root` (etcd's only role that may
manage users) and enables it, as `etcdctl user add root && etcdctl auth enable`
do. Until then every client etcd admits may do anything: run it only against an
etcd that admits no one else (the chart's bundled etcd, which admits only
clients with a certificate of its CA)."""

from __future__ import annotations

from dataclasses import replace

import aetcd.exceptions
from aetcd import rpc
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError, EtcdConfig, EtcdConfigError

ROOT = "root"
_AUTH_OFF = "authentication disabled"  # EtcdAccessError's words for etcd's "authentication is not enabled"
_PROBE_KEY = b"/lockgate/"


async def enable_auth(config: EtcdConfig) -> bool:
    """Make sure the etcd of `config` has authentication on with `config`'s user,
    which must be root, and its password: enable it if it is off (True), else
    only check that etcd takes the password (False)."""
    if config.username != ROOT or config.password is None:
        raise EtcdConfigError(
            f"enabling etcd's authentication takes the user {ROOT!r} with its password, "
            f"not {config.username!r}: etcd lets only root's role manage users"
        )
    as_root = Etcd(config)
    try:
        await as_root.get(_PROBE_KEY)  # connects, with retries while etcd is not up yet
    except EtcdAccessError as error:
        if _AUTH_OFF not in str(error):
            raise  # auth is on and refuses the password, or another refusal: said as it is
    else:
        return False
    finally:
        await as_root.close()
    async with Etcd(replace(config, username=None, password=None)) as anonymous:
        try:
            await anonymous.auth("UserAdd", rpc.AuthUserAddRequest(name=ROOT, password=config.password))
        except aetcd.exceptions.PreconditionFailedError as error:
            if "already exists" not in str(error):
                raise
            change = rpc.AuthUserChangePasswordRequest(name=ROOT, password=config.password)
            await anonymous.auth("UserChangePassword", change)
        await anonymous.auth("UserGrantRole", rpc.AuthUserGrantRoleRequest(user=ROOT, role=ROOT))
        await anonymous.auth("AuthEnable", rpc.AuthEnableRequest())
    return True
