"""Where the scenarios run: what differs between the emulated cluster and a real one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from lockgate.runtime.coordination.etcd import EtcdConfig


class Platform(Protocol):
    api: client.ApiClient
    namespace: str
    shared: Path
    """A directory the test and every pod of a job see at this same path: input, output, checkpoints."""
    etcd: EtcdConfig
    """The etcd the operator and the jobs use, as the test reaches it."""

    def job_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """`spec` with what this platform needs: the image, the shared directory's volume."""
        ...

    async def kill_driver(self, pod: str) -> None:
        """Kill the driver's processes at once, as a crash does (the pod stays, Failed)."""
        ...

    async def driver_stopped(self, pod: str) -> bool:
        """Whether nothing of the pod runs any more."""
        ...

    async def pod_log(self, pod: str) -> str:
        """What the pod's container wrote, as `kubectl logs` shows it."""
        ...

    async def diagnostics(self) -> str:
        """Logs to show when a scenario fails: the operator's, the drivers' and the executors'."""
        ...
