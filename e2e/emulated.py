"""The platform of every run here: kmock's emulated API server, the operator as
the `lockgate operator` process users run, a real etcd, checkpoint storage on
the local disk, and the pod runner playing the kubelet for every pod: the
operator's drivers and the executor pods Spark's Kubernetes backend creates."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from lockgate.runtime.coordination.etcd import EtcdConfig

from e2e.log_tail import telling_tail
from e2e.pod_runner import PodRunner
from e2e.rbac import authorized, chart_operator_grants
from tests.kube_emulator import RESTRICTED, VersionedEmulator, add_namespace, emulated_api_server
from tests.operator.operator_process import OperatorProcess

NAMESPACE = "streams"


@dataclass
class EmulatedCluster:
    emulator: VersionedEmulator
    api: client.ApiClient
    runner: PodRunner
    operator: OperatorProcess
    etcd: EtcdConfig
    shared: Path
    namespace: str = NAMESPACE

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, etcd: EtcdConfig, workdir: Path, *, executor_pods: bool, storage_root: str | None = None
    ) -> AsyncIterator[EmulatedCluster]:
        """`storage_root`: the operator's (default: checkpoints in the shared directory)."""
        async with emulated_api_server() as (emulator, url):
            chart_operator_grants()  # rendered once, before the server answers anyone
            emulator.authorized = authorized  # RBAC: Spark's Role, the chart's operator rules
            add_namespace(emulator, NAMESPACE, RESTRICTED)  # the operator runs jobs only in such
            shared = workdir / "shared"
            root = storage_root or f"file://{shared}/checkpoints"
            operator = await OperatorProcess.start(url, etcd.endpoints[0], workdir, storage_root=root)
            api = client.ApiClient(client.Configuration(host=url))
            runner = PodRunner(api, NAMESPACE, workdir / "pods", executor_pods=executor_pods)
            try:
                async with runner.running():
                    yield cls(emulator, api, runner, operator, etcd, shared)
            finally:
                await operator.stop()

    def job_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        # Never pulled: the pod runner runs this checkout, as the image holds it.
        return {"image": "lockgate:e2e", **spec}

    async def kill_driver(self, pod: str) -> None:
        self.runner.kill(pod)

    async def driver_stopped(self, pod: str) -> bool:
        running = self.runner.pods.get(pod)
        return running is None or running.process.returncode is not None

    async def pod_log(self, pod: str) -> str:
        return self.runner.pods[pod].log.read_text(errors="replace")

    async def diagnostics(self) -> str:
        pods = "\n".join(f"--- {name}\n{self.runner.log_tail(name)}" for name in self.runner.pods)
        return f"--- operator\n{telling_tail(self.operator.log.read_text())}\n{pods}"
