"""Asking a running job for a savepoint: used by the CLI and the operator."""

from __future__ import annotations

import math
import uuid

from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.records import SavepointRequest, SavepointResult, decode, encode


async def request_savepoint(
    etcd: KeyValueStore,
    keys: JobKeys,
    stop: bool = False,
    directory: str | None = None,
    request_id: str | None = None,
    *,
    expires_in_s: float,
) -> str:
    """Write a savepoint request; returns its id. The same id is served only once.
    etcd removes the request `expires_in_s` after it was made if no driver took it
    up by then (the requester stopped waiting: a stop nobody awaits would end a
    later launch by surprise)."""
    request_id = request_id or uuid.uuid4().hex[:12]
    if not expires_in_s > 0:
        raise ValueError(f"a savepoint request's expiry must be positive, got {expires_in_s} s")
    lease = await etcd.grant_lease(max(1, math.ceil(expires_in_s)))
    await etcd.put(keys.savepoint_request(request_id), encode(SavepointRequest(stop, directory)), lease)
    return request_id


async def await_savepoint(
    etcd: KeyValueStore, keys: JobKeys, request_id: str, timeout_s: float
) -> SavepointResult:
    """The final result of a request; `TimeoutError` if none arrives in time."""
    key = keys.savepoint_result(request_id)

    async def final() -> SavepointResult:
        _, revision = await etcd.get_prefix_at(key)
        data = await etcd.get(key)
        if data is not None and (result := decode(SavepointResult, data)).status != "pending":
            return result
        async for event in etcd.watch_prefix(key, revision + 1):
            if event.key == key and not event.deleted:
                result = decode(SavepointResult, event.value)
                if result.status != "pending":
                    return result
        raise AssertionError("a watch does not end")

    return await within(final(), timeout_s)
