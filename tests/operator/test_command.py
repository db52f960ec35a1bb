"""`lockgate operator` as users start it: a process with a kubeconfig."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import kmock
import yaml
from kubernetes import client

from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.polling import eventually, eventually_true

LOCKGATE = str(Path(sys.executable).parent / "lockgate")


def _kubeconfig(path: Path, server: str) -> Path:
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


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_operator_command_reconciles_a_job(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_server, tmp_path: Path
) -> None:
    emulator, url = cluster
    port = _free_port()
    env = {**os.environ, "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", url))}
    process = await asyncio.create_subprocess_exec(
        LOCKGATE,
        "operator",
        "--etcd",
        etcd_server.endpoint,
        # Cluster-wide: kmock cannot serve the namespace listing a namespaced operator watches.
        "--all-namespaces",
        "--checkpoint-storage",
        f"file://{tmp_path}/checkpoints",
        "--observe-interval",
        "0.5",
        "--metrics-port",
        str(port),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "operator.log").open("w"),
    )
    try:
        kubectl = Kubectl(emulator, client.ApiClient(client.Configuration(host=url)))
        await kubectl.apply("cli-job", SPEC)
        try:
            await eventually(
                lambda: kubectl.exists("v1/pods", "cli-job-driver-1"), "the driver pod is created", 30
            )
        except AssertionError:
            raise AssertionError((tmp_path / "operator.log").read_text()[-4000:]) from None
        created = 'lockgate_operator_reconciles_total{handler="create",result="ok"} 1.0'
        scraped: list[str] = []

        async def counted() -> bool:
            scraped.append(await asyncio.to_thread(_scrape, f"http://127.0.0.1:{port}/metrics"))
            return created in scraped[-1]

        await eventually_true(counted, "the create handler is counted in the scraped metrics")
        assert 'lockgate_operator_jobs{phase="Deploying"} 1.0' in scraped[-1]
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)


def test_the_operator_command_needs_etcd_and_a_scope(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_ETCD"}
    no_etcd = subprocess.run(
        [LOCKGATE, "operator", "-A"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert no_etcd.returncode == 1
    assert "--etcd (or $LOCKGATE_ETCD) is required" in no_etcd.stderr
    no_scope = subprocess.run(
        [LOCKGATE, "operator", "--etcd", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert no_scope.returncode == 1
    assert "--namespace NS" in no_scope.stderr
