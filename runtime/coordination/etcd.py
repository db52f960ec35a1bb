"""The one place Lockgate talks to etcd (through aetcd).

Adds what aetcd leaves out: several endpoints with failover, retries with
backoff on connection errors, TLS, watches that resume where they stopped
after a reconnect, and errors that name the endpoints tried.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aetcd
import aetcd.exceptions
import aetcd.transactions
import aetcd.watcher
import grpc
from aetcd import rpc
from lockgate.runtime.coordination.cancellation import (
    bounded,
    cancellation_requests,
    raise_if_cancelled_since,
    raise_if_cancelling,
    within,
)
from lockgate.runtime.coordination.kv_store import (
    Compare,
    Delete,
    KeyValueStore,
    LeaseNotFoundError,
    Operation,
    Put,
    ValueIs,
    WatchEvent,
)

log = logging.getLogger(__name__)
WATCH_CANCEL_WAIT_S = 1.0

_TRANSIENT = (
    aetcd.exceptions.ConnectionFailedError,
    aetcd.exceptions.ConnectionTimeoutError,
    aetcd.exceptions.InternalError,
    grpc.aio.AioRpcError,
    asyncio.TimeoutError,
    ConnectionError,
)


class EtcdUnavailableError(ConnectionError):
    """No endpoint answered within the retries."""


class EtcdAccessError(PermissionError):
    """etcd refused this identity: a wrong user or password, a user given to an etcd
    without authentication, or a key outside what the user's role grants. Retrying
    cannot help; the message names the user and, where there is one, the key."""


# etcd forgets a simple token when it restarts, when the token is unused for its
# TTL (5 min by default) and when the user's password changes: the client then
# authenticates again, as etcd's own Go client does.
_STALE_TOKEN = "invalid auth token"
_DENIED = "permission denied"


class EtcdConfigError(ValueError):
    pass


@dataclass(frozen=True)
class EtcdConfig:
    """Where etcd is and how to authenticate. Endpoints: `http(s)://host:port`."""

    endpoints: tuple[str, ...]
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    request_timeout_s: float = 5.0
    retries: int = 6
    backoff_s: float = 0.1
    max_backoff_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise EtcdConfigError("at least one etcd endpoint is needed")
        for endpoint in self.endpoints:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
                raise EtcdConfigError(
                    f"etcd endpoint {endpoint!r} must look like http://host:port or https://host:port"
                )
        if (self.username is None) != (self.password is None):
            raise EtcdConfigError("etcd username and password must be given together")
        if (self.cert_file is None) != (self.key_file is None):
            raise EtcdConfigError("an etcd client certificate needs both cert_file and key_file")

    @staticmethod
    def from_url(urls: str, **options: Any) -> EtcdConfig:
        """`urls`: comma-separated endpoints, e.g. `http://10.0.0.1:2379,http://10.0.0.2:2379`."""
        return EtcdConfig(tuple(u.strip() for u in urls.split(",") if u.strip()), **options)


class Etcd(KeyValueStore):
    """A connection to one of the configured endpoints, failing over between them:
    the `KeyValueStore` every process of a job shares."""

    def __init__(self, config: EtcdConfig) -> None:
        self.config = config
        self._client: aetcd.Client | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    # -- connection ----------------------------------------------------------------

    async def connect(self) -> None:
        async with self._lock:
            if self._client is None:
                self._client = await self._connect_any()

    async def _connect_any(self) -> aetcd.Client:
        errors = []
        endpoints = self.config.endpoints
        for attempt in range(len(endpoints)):
            endpoint = endpoints[(self._next + attempt) % len(endpoints)]
            parts = urlsplit(endpoint)
            client = aetcd.Client(
                host=parts.hostname or "localhost",
                port=parts.port or 2379,
                username=self.config.username,
                password=self.config.password,
                timeout=self.config.request_timeout_s,
            )
            try:
                await (connect_tls(client, self.config) if endpoint.startswith("https") else client.connect())
                await within(client.status(), self.config.request_timeout_s)
            except Exception as error:  # noqa: BLE001 - each endpoint's failure is reported
                await _close_quietly(client)
                self._raise_if_refused(endpoint, error)
                errors.append(f"{endpoint}: {_describe(error)}")
                continue
            self._next = (self._next + attempt) % len(endpoints)
            return client
        raise EtcdUnavailableError("etcd is unreachable; tried " + "; ".join(errors))

    def _raise_if_refused(self, endpoint: str, error: Exception) -> None:
        """Authentication etcd refused (not one it could not answer) ends the connect."""
        message = _describe(error) if isinstance(error, grpc.aio.AioRpcError) else str(error)
        if "authentication is not enabled" in message:
            raise EtcdAccessError(
                f"etcd at {endpoint} has authentication disabled, so user {self.config.username!r} "
                "would protect nothing: enable it (etcdctl auth enable) or connect without --etcd-user"
            ) from error
        if "authentication failed" in message:
            reason = message.split("etcdserver: ")[-1]
            user = self.config.username
            raise EtcdAccessError(f"etcd at {endpoint} refused user {user!r}: {reason}") from error

    async def _reconnect(self, failed: aetcd.Client | None) -> None:
        """Replace `failed`; a no-op if another caller replaced it already (one broken
        channel breaks every watch on it, and they must not take turns reconnecting)."""
        async with self._lock:
            if self._client is not failed and self._client is not None:
                return
            if self._client is not None:
                await _close_quietly(self._client)
                self._client = None
            self._next += 1
            self._client = await self._connect_any()

    async def close(self) -> None:
        async with self._lock:
            if self._client is not None:
                await _close_quietly(self._client)
                self._client = None

    async def _call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        delay = self.config.backoff_s
        last: BaseException | None = None
        for _ in range(self.config.retries):
            client = self._client
            try:
                if client is None:
                    await self.connect()
                    client = self._client
                assert client is not None
                is_auth = operation == "auth"
                call = functools.partial(_auth_rpc, client) if is_auth else getattr(client, operation)
                return await call(*args, **kwargs)
            except EtcdUnavailableError as error:
                last = error
            except aetcd.exceptions.UnauthenticatedError as error:
                if _STALE_TOKEN not in str(error):
                    raise
                last = error
                log.info("etcd forgot this client's token (%s); authenticating again", _describe(error))
                await self._reconnect(client)
                continue  # at once: nothing is wrong with etcd
            except _TRANSIENT as error:
                raise_if_cancelling()
                last = error
                log.warning("etcd %s failed (%s); reconnecting", operation, _describe(error))
                try:
                    await self._reconnect(client)
                except EtcdUnavailableError as unavailable:
                    last = unavailable
            except aetcd.exceptions.ClientError as error:
                if _DENIED in str(error):
                    raise self._denied(operation, args) from error
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.max_backoff_s)
        raise EtcdUnavailableError(
            f"etcd {operation} failed after {self.config.retries} attempts against "
            f"{', '.join(self.config.endpoints)}: {_describe(last)}"
        )

    def _denied(self, operation: str, args: tuple[Any, ...]) -> EtcdAccessError:
        who = f"etcd user {self.config.username!r}" if self.config.username else "this client (no etcd user)"
        if operation == "auth":
            return EtcdAccessError(f"{who} may not manage etcd's users and roles ({args[0]})")
        subject = f"key {args[0]!r}" if args and isinstance(args[0], bytes) else "a key it touches"
        return EtcdAccessError(
            f"{who} may not {operation} {subject}: its etcd role does not cover it "
            "(a job's role covers only /lockgate/<namespace>/<job>/)"
        )

    # -- key-value -----------------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        result = await self._call("get", key)
        return None if result is None else bytes(result.value)

    async def get_prefix_at(self, prefix: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
        result = await self._call("get_prefix", prefix)
        items = sorted((bytes(kv.key), bytes(kv.value)) for kv in result)
        return items, int(result.header.revision)

    async def put(self, key: bytes, value: bytes, lease: int | None = None) -> None:
        try:
            await self._call("put", key, value, lease=lease)
        except aetcd.exceptions.ClientError as error:
            if lease is not None and "lease not found" in str(error):
                raise LeaseNotFoundError(f"lease {lease:x} has expired or was revoked") from error
            raise

    async def delete(self, key: bytes) -> None:
        await self._call("delete", key)

    async def delete_prefix(self, prefix: bytes) -> None:
        await self._call("delete_prefix", prefix)

    async def transaction(
        self, compare: Sequence[Compare], success: Sequence[Operation], failure: Sequence[Operation] = ()
    ) -> bool:
        try:
            succeeded, _ = await self._call(
                "transaction",
                [_compare(c) for c in compare],
                [_operation(o) for o in success],
                [_operation(o) for o in failure],
            )
        except aetcd.exceptions.ClientError as error:
            if "lease not found" in str(error):
                raise LeaseNotFoundError(f"a transaction wrote with an ended lease: {error}") from error
            raise
        return bool(succeeded)

    # -- leases --------------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> int:
        lease = await self._call("lease", ttl_s)
        return int(lease.id)

    async def refresh_lease(self, lease_id: int) -> int:
        reply = await self._call("refresh_lease", lease_id)
        return -1 if reply is None else int(reply.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke the lease; one etcd already expired is revoked as far as anyone can tell."""
        try:
            await self._call("revoke_lease", lease_id)
        except aetcd.exceptions.ClientError as error:
            if "lease not found" not in str(error):
                raise

    # -- users and roles -------------------------------------------------------------

    async def auth(self, method: str, request: Any) -> Any:
        """One call of etcd's Auth service (`UserAdd`, `RoleGrantPermission`, ...) as
        this client's user, with the retries and re-authentication of every call."""
        return await self._call("auth", method, request)

    # -- watches -------------------------------------------------------------------

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Every change under `prefix` from `start_revision` on, across reconnects."""
        next_revision = start_revision
        while True:
            client = self._client
            try:
                requests = cancellation_requests()
                watch = await self._call("watch_prefix", prefix, start_revision=next_revision)
                try:
                    raise_if_cancelled_since(requests)
                    async for event in watch:
                        kv = event.kv
                        next_revision = int(kv.mod_revision) + 1
                        yield WatchEvent(
                            key=bytes(kv.key),
                            value=bytes(kv.value),
                            deleted=event.kind == aetcd.EventKind.DELETE,
                            revision=int(kv.mod_revision),
                        )
                finally:
                    await _cancel_quietly(watch)
            except _TRANSIENT as error:
                raise_if_cancelling()  # a cancelled watch's stream fails too: that is no break
                log.warning("etcd watch on %r broke (%s); resuming", prefix, _describe(error))
                await self._reconnect_with_backoff(client)

    async def _reconnect_with_backoff(self, failed: aetcd.Client | None) -> None:
        delay = self.config.backoff_s
        for _ in range(self.config.retries):
            try:
                await self._reconnect(failed)
                return
            except EtcdUnavailableError:
                pass
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.max_backoff_s)
        await self._reconnect(failed)


def _compare(guard: Compare) -> Any:
    if isinstance(guard, ValueIs):
        return aetcd.transactions.Value(guard.key) == guard.value
    return aetcd.transactions.Version(guard.key) == 0


def _operation(operation: Operation) -> Any:
    if isinstance(operation, Put):
        return aetcd.transactions.Put(operation.key, operation.value, lease=operation.lease)
    if isinstance(operation, Delete):
        return aetcd.transactions.Delete(operation.key)
    prefix = operation.prefix
    return aetcd.transactions.Delete(prefix, range_end=aetcd.utils.prefix_range_end(prefix))


async def connect_tls(client: Any, config: EtcdConfig) -> None:
    """TLS for aetcd, whose `connect()` only opens plaintext channels: opens a TLS gRPC
    channel and wires aetcd's service stubs to it, the same stubs `aetcd.Client.connect`
    wires to a plaintext channel."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(config.ca_file),
        private_key=_read(config.key_file),
        certificate_chain=_read(config.cert_file),
    )
    client.channel = grpc.aio.secure_channel(f"{client._host}:{client._port}", credentials)
    if config.username is not None:
        client.auth_stub = rpc.AuthStub(client.channel)
        reply = await client.auth_stub.Authenticate(
            rpc.AuthenticateRequest(name=config.username, password=config.password),
            timeout=config.request_timeout_s,
        )
        client.metadata = (("token", reply.token),)
    client.kvstub = rpc.KVStub(client.channel)
    client.clusterstub = rpc.ClusterStub(client.channel)
    client.leasestub = rpc.LeaseStub(client.channel)
    client.maintenancestub = rpc.MaintenanceStub(client.channel)
    client._watcher = aetcd.watcher.Watcher(
        rpc.WatchStub(client.channel), timeout=config.request_timeout_s, metadata=client.metadata
    )
    client._connected.set()


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


async def _auth_rpc(client: aetcd.Client, method: str, request: Any) -> Any:
    """aetcd has no users-and-roles API: its generated Auth stub on the client's
    channel, with the client's token, and its error mapping."""
    stub = rpc.AuthStub(client.channel)
    try:
        return await getattr(stub, method)(request, timeout=client._timeout, metadata=client.metadata)
    except grpc.aio.AioRpcError as error:
        aetcd.exceptions._handle_exception(error)


def _describe(error: BaseException | None) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}" if error is not None else "no answer"


async def _close_quietly(client: aetcd.Client) -> None:
    try:
        await client.close()
    except Exception:
        log.debug("closing an etcd client failed", exc_info=True)


async def _cancel_quietly(watch: Any) -> None:
    """Tell etcd the watch is over, within a bound: aetcd's cancel waits on the
    watch stream, which a broken or paused connection never drains."""
    try:
        await bounded(watch.cancel(), "cancelling an etcd watch", WATCH_CANCEL_WAIT_S)
    except Exception:
        log.debug("cancelling an etcd watch failed", exc_info=True)
