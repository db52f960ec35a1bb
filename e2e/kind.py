"""The scenarios against a real cluster (kind), set up as e2e/README.md shows:
the chart installed, the image loaded into the nodes, a host directory mounted
into every node at the same path, etcd port-forwarded to the test."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.stream import stream
from lockgate.operator.naming import COMPONENT_LABEL
from lockgate.runtime.coordination.etcd import EtcdConfig

from e2e.log_tail import telling_tail


def _setting(name: str, default: str) -> str:
    return os.environ.get(f"LOCKGATE_E2E_{name}", default)


@dataclass
class KindCluster:
    api: client.ApiClient
    namespace: str
    shared: Path
    etcd: EtcdConfig
    image: str
    operator_namespace: str

    @classmethod
    @contextlib.asynccontextmanager
    async def connected(cls) -> AsyncIterator[KindCluster]:
        config.load_kube_config()  # type: ignore[no-untyped-call]
        api = client.ApiClient()
        try:
            yield cls(
                api,
                namespace=_setting("NAMESPACE", "lockgate-e2e"),
                shared=Path(_setting("SHARED", "/tmp/lockgate-e2e")),
                control_plane=EtcdConfig((_setting("ETCD", "http://127.0.0.1:2379"),)),
                image=_setting("IMAGE", "lockgate:e2e"),
                operator_namespace=_setting("OPERATOR_NAMESPACE", "lockgate"),
            )
        finally:
            api.close()

    def job_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        # The shared directory at its own path in the driver and every executor: the job's
        # input, output and file:// checkpoints are where the test reads and writes them.
        volume = {"name": "shared", "hostPath": {"path": str(self.shared), "type": "Directory"}}
        mount = {"name": "shared", "mountPath": str(self.shared)}
        return {
            "image": self.image,
            "imagePullPolicy": "Never",  # loaded into the nodes with `kind load docker-image`
            "volumes": [volume],
            "volumeMounts": [mount],
            **spec,
        }

    async def kill_driver(self, pod: str) -> None:
        # Every process of the container but its init (tini), which then exits with them.
        core = client.CoreV1Api(self.api)
        command = ["sh", "-c", "kill -9 -1"]
        await asyncio.to_thread(
            stream,
            core.connect_get_namespaced_pod_exec,
            pod,
            self.namespace,
            command=command,
            stderr=True,
            stdout=True,
        )

    async def driver_stopped(self, pod: str) -> bool:
        core = client.CoreV1Api(self.api)
        try:
            found = await asyncio.to_thread(core.read_namespaced_pod, pod, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
        return found.status.phase in ("Succeeded", "Failed")

    async def pod_log(self, pod: str) -> str:
        core = client.CoreV1Api(self.api)
        return str(await asyncio.to_thread(core.read_namespaced_pod_log, pod, self.namespace))

    async def diagnostics(self) -> str:
        core = client.CoreV1Api(self.api)
        logs = []
        for namespace, selector in (
            (self.operator_namespace, f"{COMPONENT_LABEL}=operator"),
            (self.namespace, f"{COMPONENT_LABEL} in (driver,executor)"),
        ):
            pods = await asyncio.to_thread(core.list_namespaced_pod, namespace, label_selector=selector)
            for pod in pods.items:
                text = await asyncio.to_thread(
                    core.read_namespaced_pod_log, pod.metadata.name, namespace, tail_lines=2000
                )
                logs.append(f"--- {pod.metadata.name}\n{telling_tail(text)}")
        return "\n".join(logs)
