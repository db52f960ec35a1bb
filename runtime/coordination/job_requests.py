"""Asking a running job for a savepoint or a rescale: used by the CLI and the operator.

A request is written under a lease, so etcd removes it when its requester stopped
waiting before any driver took it up; the driver writes results under the
request's id until a final one (anything but `pending`)."""

from __future__ import annotations

import math
import uuid
from typing import TypeVar

from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.coordination.records import (
    RescaleRequest,
    RescaleResult,
    SavepointRequest,
    SavepointResult,
    decode,
    encode,
)

R = TypeVar("R", SavepointResult, RescaleResult)


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
    await _request(
        etcd, keys.savepoint_request(request_id), encode(SavepointRequest(stop, directory)), expires_in_s
    )
    return request_id


async def await_savepoint(
    etcd: KeyValueStore, keys: JobKeys, request_id: str, timeout_s: float
) -> SavepointResult:
    """The final result of a request; `TimeoutError` if none arrives in time."""
    return await _result(etcd, keys.savepoint_result(request_id), SavepointResult, timeout_s)


async def request_rescale(
    etcd: KeyValueStore,
    keys: JobKeys,
    parallelism: int,
    generation: int | None = None,
    request_id: str | None = None,
    *,
    expires_in_s: float,
) -> str:
    """Ask the running driver to change the job's parallelism in place; returns the
    request's id. Expires as a savepoint request does."""
    request_id = request_id or uuid.uuid4().hex[:12]
    await _request(
        etcd, keys.rescale_request(request_id), encode(RescaleRequest(parallelism, generation)), expires_in_s
    )
    return request_id


async def await_rescale(
    etcd: KeyValueStore, keys: JobKeys, request_id: str, timeout_s: float, *, taken_up_s: float | None = None
) -> RescaleResult:
    """The final result of a rescale request; `TimeoutError` if none arrives in time,
    or if no driver took the request up (answered `pending`) within `taken_up_s`."""
    key = keys.rescale_result(request_id)
    if taken_up_s is not None:
        await _result(etcd, key, RescaleResult, min(taken_up_s, timeout_s), final=False)
    return await _result(etcd, key, RescaleResult, timeout_s)


async def _request(etcd: KeyValueStore, key: bytes, request: bytes, expires_in_s: float) -> None:
    """Write `request` under a lease of `expires_in_s`: gone when its requester stopped waiting."""
    if not expires_in_s > 0:
        raise ValueError(f"a request's expiry must be positive, got {expires_in_s} s")
    lease = await etcd.grant_lease(max(1, math.ceil(expires_in_s)))
    await etcd.put(key, request, lease)


async def _result(
    etcd: KeyValueStore, key: bytes, record: type[R], timeout_s: float, *, final: bool = True
) -> R:
    """The result at `key` once final (or, `final=False`, the first of any kind)."""

    def wanted(result: R) -> bool:
        return result.status != "pending" or not final

    async def answer() -> R:
        _, revision = await etcd.get_prefix_at(key)
        data = await etcd.get(key)
        if data is not None and wanted(result := decode(record, data)):
            return result
        async for event in etcd.watch_prefix(key, revision + 1):
            if event.key == key and not event.deleted and wanted(result := decode(record, event.value)):
                return result
        raise AssertionError("a watch does not end")

    return await within(answer(), timeout_s)
