"""`lockgate operator` run as users run it: a process with a kubeconfig.

Peers of one peering run as separate processes, as replicas of the operator
Deployment do: kopf stops the tasks it finds on its event loop when it exits,
so two operators in one loop would stop each other."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

LOCKGATE = str(Path(sys.executable).parent / "lockgate")


def kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {"token": "not-checked"}}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "tester"}}],
        "current-context": "emulated",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class OperatorProcess:
    process: asyncio.subprocess.Process
    metrics_port: int
    log: Path

    @classmethod
    async def start(
        cls,
        api_url: str,
        etcd_endpoint: str,
        workdir: Path,
        *extra: str,
        name: str = "operator",
        storage_root: str | None = None,
        container_env: dict[str, str] | None = None,
    ) -> OperatorProcess:
        """`storage_root`: the operator's --checkpoint-storage (default: under `workdir`).
        `container_env`: the environment its container gets, as the kubelet makes it from
        the pod spec; then that is all the process gets besides PATH, a HOME of its own and
        the kubeconfig — nothing of the test's (its AWS_* variables, say). Without it the
        process inherits the test's environment."""
        port = free_port()
        if container_env is None:
            inherited = dict(os.environ)
        else:
            home = workdir / f"{name}-home"
            home.mkdir(exist_ok=True)
            inherited = {"PATH": os.environ["PATH"], "HOME": str(home), **container_env}
        env = {**inherited, "KUBECONFIG": str(kubeconfig(workdir / f"{name}.kubeconfig", api_url))}
        log = workdir / f"{name}.log"
        process = await asyncio.create_subprocess_exec(
            LOCKGATE,
            "operator",
            "--etcd",
            etcd_endpoint,
            # Cluster-wide: kmock cannot serve the namespace listing a namespaced operator watches.
            "--all-namespaces",
            "--checkpoint-storage",
            storage_root or f"file://{workdir}/checkpoints",
            "--observe-interval",
            "0.5",
            "--metrics-port",
            str(port),
            *extra,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        return cls(process, port, log)

    async def metrics(self) -> str:
        """The Prometheus exposition scraped over HTTP (empty until the server listens)."""

        def scrape() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
                    return str(r.read().decode())
            except OSError:
                return ""

        return await asyncio.to_thread(scrape)

    def log_tail(self) -> str:
        return self.log.read_text()[-4000:]

    async def stop(self) -> int:
        """SIGTERM, as the kubelet stops a pod; the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), 30)
