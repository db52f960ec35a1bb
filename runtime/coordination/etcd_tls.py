"""TLS for aetcd, whose `connect()` only opens plaintext channels.

Opens a TLS gRPC channel and wires aetcd's service stubs to it, the same
stubs `aetcd.Client.connect` wires to a plaintext channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import aetcd.watcher
import grpc
from aetcd import rpc

if TYPE_CHECKING:
    from lockgate.runtime.coordination.etcd import EtcdConfig


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


async def connect_tls(client: Any, config: EtcdConfig) -> None:
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
