"""The etcd fixtures of every test (a pytest plugin the root conftest loads):
one etcd for the session, one of a test's own, clients, job keys, and an etcd
with authentication on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys

from tests.etcd_auth import enable_auth


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of the test's own, to pause, kill or restart."""
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    yield server
    server.resume()
    server.stop()


@pytest.fixture
def etcd_config(etcd_server: EtcdServer) -> EtcdConfig:
    return EtcdConfig((etcd_server.endpoint,))


@pytest_asyncio.fixture
async def etcd(etcd_config: EtcdConfig) -> AsyncIterator[Etcd]:
    async with Etcd(etcd_config) as client:
        yield client


@pytest.fixture
def keys() -> JobKeys:
    return JobKeys("test", f"job-{uuid.uuid4().hex[:8]}")


@pytest_asyncio.fixture
async def root_config(own_etcd: EtcdServer) -> EtcdConfig:
    """`own_etcd` with authentication on; the root user's config."""
    return await enable_auth(own_etcd)
