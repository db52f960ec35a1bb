"""`lockgate operator` as users start it: a process with a kubeconfig."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import kmock
import yaml
from kubernetes import client

from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.polling import eventually

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


async def test_the_operator_command_reconciles_a_job(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_server, tmp_path: Path
) -> None:
    emulator, url = cluster
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
