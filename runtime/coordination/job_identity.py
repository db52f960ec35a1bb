"""A job's own etcd identity: a user whose one role reads and writes the job's
keys (`/lockgate/<namespace>/<job>/`) and nothing else.

The operator makes it, as etcd's root, before each launch, with a password new
for that launch (so a task of an earlier launch can no longer authenticate), and
removes it with the job. Users and roles are etcd's own (`etcdctl user get
lockgate/<namespace>/<job>` shows one); nothing here works without etcd auth
enabled, and nothing pretends to.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import aetcd.exceptions
import aetcd.utils
from aetcd import rpc
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError
from lockgate.runtime.coordination.keys import JobKeys

_EXISTS = "already exists"
_MISSING = "not found"


@dataclass(frozen=True)
class JobIdentity:
    """The user and role of one job; both are named `lockgate/<namespace>/<job>`
    ('/' cannot occur in a namespace or a job id, so no two jobs share a name)."""

    keys: JobKeys

    @property
    def name(self) -> str:
        return f"lockgate/{self.keys.namespace}/{self.keys.job}"


def new_password() -> str:
    return secrets.token_urlsafe(32)


async def grant(etcd: Etcd, identity: JobIdentity, password: str) -> None:
    """Make (or bring back to) the job's user with `password`, holding only the
    job's role, which reads and writes only the job's keys. Idempotent: a retried
    launch step runs it again."""
    name = identity.name
    key = identity.keys.root
    range_end = aetcd.utils.prefix_range_end(key)
    await _tolerating(_EXISTS, etcd.auth("RoleAdd", rpc.AuthRoleAddRequest(name=name)))
    permission = rpc.Permission(permType=rpc.Permission.READWRITE, key=key, range_end=range_end)
    grant_permission = rpc.AuthRoleGrantPermissionRequest(name=name, perm=permission)
    await _admin(etcd.auth("RoleGrantPermission", grant_permission))
    add_user = rpc.AuthUserAddRequest(name=name, password=password)
    if not await _tolerating(_EXISTS, etcd.auth("UserAdd", add_user)):
        change = rpc.AuthUserChangePasswordRequest(name=name, password=password)
        await _admin(etcd.auth("UserChangePassword", change))
    await _admin(etcd.auth("UserGrantRole", rpc.AuthUserGrantRoleRequest(user=name, role=name)))


async def revoke(etcd: Etcd, identity: JobIdentity) -> None:
    """Remove the job's user and role; what is gone already stays gone."""
    await _tolerating(_MISSING, etcd.auth("UserDelete", rpc.AuthUserDeleteRequest(name=identity.name)))
    await _tolerating(_MISSING, etcd.auth("RoleDelete", rpc.AuthRoleDeleteRequest(role=identity.name)))


async def _admin(call: Any) -> Any:
    try:
        return await call
    except EtcdAccessError as error:
        raise EtcdAccessError(
            f"{error}: making a job's etcd user takes etcd's root role; grant it to the operator's "
            "--etcd-user (etcdctl user grant-role USER root)"
        ) from error


async def _tolerating(condition: str, call: Any) -> bool:
    """False where etcd answers that `condition` holds already (`already exists`,
    `not found`): the state the call was to make."""
    try:
        await _admin(call)
    except aetcd.exceptions.PreconditionFailedError as error:
        if condition not in str(error):
            raise
        return False
    return True
