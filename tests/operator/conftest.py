"""The real kopf operator against kmock's KubernetesEmulator (the one stand-in:
no API server can be installed here) and a real etcd; a stand-in driver that
answers through etcd as the runtime's driver does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import kmock
import kopf
import pytest
import pytest_asyncio
from kubernetes import client
from lockgate.operator.driver_pod import Cluster
from lockgate.operator.handlers import register
from lockgate.operator.job import OperatorContext
from lockgate.operator.job_etcd import JobEtcd
from lockgate.operator.kube import Kube
from lockgate.runtime.coordination.etcd import EtcdConfig

from tests.runtime.coordination.conftest import etcd, etcd_config, etcd_server

__all__ = ["etcd", "etcd_config", "etcd_server"]

VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}
RESOURCES = {
    "lockgate.dev/v1alpha1/streamingjobs": ("StreamingJob", True, {"status", "scale"}),
    "v1/pods": ("Pod", True, {"status"}),
    "v1/services": ("Service", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/serviceaccounts": ("ServiceAccount", True, set()),
    "v1/events": ("Event", True, set()),
    "v1/namespaces": ("Namespace", False, set()),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True, set()),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, set()),
    "kopf.dev/v1/clusterkopfpeerings": ("ClusterKopfPeering", False, {"status"}),
}


class VersionedEmulator(kmock.KubernetesEmulator):
    """The emulator with the API server's resourceVersion semantics that kopf
    relies on: every write bumps it; a list reports the latest; a watch from a
    version replays nothing older; a JSON patch whose `test` fails gets 422."""

    _latest = 1

    def _next_version(self) -> str:
        VersionedEmulator._latest += 1
        return str(VersionedEmulator._latest)

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if request.resource is not None and request.action == kmock.action.CREATE and isinstance(data, dict):
            data.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        elif request.resource is not None and request.action == kmock.action.UPDATE:
            if isinstance(data, list):  # a JSON patch
                data.append({"op": "add", "path": "/metadata/resourceVersion", "value": self._next_version()})
            elif isinstance(data, dict):
                data.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as error:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from error

    async def _serve_list(self, request: kmock.Request) -> Any:
        listing = await super()._serve_list(request)
        listing["metadata"]["resourceVersion"] = str(VersionedEmulator._latest)
        return listing

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        since = int(request.params.get("resourceVersion") or 0)
        async for event in super()._serve_watch(request):
            version = (
                event.get("object", {}).get("metadata", {}).get("resourceVersion")
                if isinstance(event, dict)
                else None
            )
            if version is None or int(version) > since:
                yield event


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[kmock.KubernetesEmulator, str]]:
    async with VersionedEmulator() as emulator, kmock.Server(emulator) as server:
        for resource, (kind, namespaced, subresources) in RESOURCES.items():
            emulator.resources[resource] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs=VERBS, subresources=subresources
            )
        yield emulator, str(server.url).rstrip("/")


@dataclass
class Operator:
    """The operator, started and stopped by the test (to restart it mid-upgrade)."""

    url: str
    etcd_config: EtcdConfig
    storage: str
    task: asyncio.Task[None] | None = None
    context: OperatorContext | None = None
    stop_flag: asyncio.Event = field(default_factory=asyncio.Event)

    def api(self) -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=self.url))

    async def start(self) -> None:
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=self.url)

        endpoints = ",".join(self.etcd_config.endpoints)
        self.context = context = OperatorContext(
            Kube(self.api()),
            JobEtcd(self.etcd_config),
            Cluster(endpoints, self.storage),
            driver_exit_timeout_s=10,
        )
        register(registry, context, observe_every_s=0.3)
        settings = kopf.OperatorSettings()
        settings.watching.reconnect_backoff = 0.1
        settings.posting.level = logging.WARNING  # kmock stores one event per namespace (no generateName)
        self.stop_flag = asyncio.Event()
        ready = asyncio.Event()
        self.task = asyncio.create_task(
            kopf.operator(
                registry=registry,
                settings=settings,
                clusterwide=True,
                standalone=True,  # peers run as processes: see operator_process.py
                stop_flag=self.stop_flag,
                ready_flag=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 10)

    async def stop(self) -> None:
        assert self.task is not None
        self.stop_flag.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 40)
        self.task = None


@pytest_asyncio.fixture
async def operator(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_config: EtcdConfig, tmp_path: Path
) -> AsyncIterator[Operator]:
    running = Operator(cluster[1], etcd_config, f"file://{tmp_path}/checkpoints")
    await running.start()
    yield running
    if running.task is not None:
        await running.stop()


@pytest.fixture
def job_name() -> str:
    return f"sums-{uuid.uuid4().hex[:6]}"
