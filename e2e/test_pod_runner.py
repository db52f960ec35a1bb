"""The pod runner plays the kubelet for any pod, without Spark: each pod on its own
address with its downward-API env and mounted ConfigMap, a pod waiting for a
ConfigMap it mounts, the image's entrypoint for a container without a command,
and a pod's dependents terminated and gone when it goes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from kubernetes import client

from e2e.pod_runner import PodRunner
from tests.kube_emulator import emulated_api_server
from tests.polling import eventually_true

NAMESPACE = "ns"
# Prints what the pod sees, then serves on its pod IP until stopped.
PROGRAM = (
    "import os, pathlib, signal, socket\n"
    "mounted = pathlib.Path(os.environ['CONF']).read_text()\n"
    "print(os.environ['POD_IP'], os.environ['POD_NAME'], mounted, flush=True)\n"
    "server = socket.create_server((os.environ['POD_IP'], 0))\n"
    "signal.pause()  # until the runner stops the pod\n"
)


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[client.CoreV1Api, PodRunner]]:
    async with emulated_api_server() as (_, url):
        api = client.ApiClient(client.Configuration(host=url))
        runner = PodRunner(api, NAMESPACE, tmp_path / "pods", executor_pods=True)
        async with runner.running():
            yield client.CoreV1Api(api), runner


def _pod(name: str, container: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "CONF", "value": "/etc/conf/a"},  # a path in the pod: its volume's, here
    ]
    mounts = [{"name": "conf", "mountPath": "/etc/conf"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": {
            "containers": [
                {"name": "main", "image": "lockgate:e2e", "env": env, "volumeMounts": mounts, **container}
            ],
            "volumes": [{"name": "conf", "configMap": {"name": "conf"}}],
            "terminationGracePeriodSeconds": 5,
        },
    }


async def _phase(core: client.CoreV1Api, name: str) -> str | None:
    try:
        pod = await asyncio.to_thread(core.read_namespaced_pod, name, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return str(pod.status.phase)


async def test_pods_run_on_their_own_addresses_and_go_with_their_owner(
    cluster: tuple[client.CoreV1Api, PodRunner],
) -> None:
    core, runner = cluster
    owner_body = _pod("owner", {"command": ["python", "-c", PROGRAM]})
    owner = await asyncio.to_thread(core.create_namespaced_pod, NAMESPACE, owner_body)
    reference = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner.metadata.uid}
    dependent_body = _pod("dependent", {"args": ["python", "-c", PROGRAM]}, ownerReferences=[reference])
    await asyncio.to_thread(core.create_namespaced_pod, NAMESPACE, dependent_body)

    async def waiting() -> bool:
        return await _phase(core, "owner") == "Pending" and "owner" not in runner.pods

    await eventually_true(waiting, "the pods wait for the ConfigMap they mount", 5)
    config_map = {"metadata": {"name": "conf"}, "data": {"a": "mounted"}}
    await asyncio.to_thread(core.create_namespaced_config_map, NAMESPACE, config_map)

    async def serving() -> bool:
        return all(
            name in runner.pods and " mounted" in runner.pods[name].log.read_text()
            for name in ("owner", "dependent")
        )

    await eventually_true(serving, "both pods run and print what they see", 30)
    pods = {
        name: await asyncio.to_thread(core.read_namespaced_pod, name, NAMESPACE)
        for name in ("owner", "dependent")
    }
    addresses = {name: pod.status.pod_ip for name, pod in pods.items()}
    assert len(set(addresses.values())) == 2, addresses
    for name, pod in pods.items():
        assert pod.status.phase == "Running"
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
        assert runner.pods[name].log.read_text().startswith(f"{addresses[name]} {name} mounted")
    hosts = runner.network.hosts_file.read_text()
    assert f"{addresses['owner']} owner\n" in hosts

    await asyncio.to_thread(core.delete_namespaced_pod, "owner", NAMESPACE)

    async def gone() -> bool:
        return await _phase(core, "owner") is None and await _phase(core, "dependent") is None

    await eventually_true(gone, "the owner and, collected, its dependent are gone", 30)
    assert all(runner.pods[name].process.returncode is not None for name in ("owner", "dependent"))


async def test_a_container_that_cannot_start_is_reported_and_the_next_pod_still_runs(
    cluster: tuple[client.CoreV1Api, PodRunner],
) -> None:
    core, runner = cluster
    config_map = {"metadata": {"name": "conf"}, "data": {"a": "mounted"}}
    await asyncio.to_thread(core.create_namespaced_config_map, NAMESPACE, config_map)
    broken = _pod("broken", {"command": ["/opt/nowhere/bin/app"]})
    await asyncio.to_thread(core.create_namespaced_pod, NAMESPACE, broken)

    async def failed() -> bool:
        return await _phase(core, "broken") == "Failed"

    await eventually_true(failed, "the pod whose command does not exist is Failed", 30)
    pod = await asyncio.to_thread(core.read_namespaced_pod, "broken", NAMESPACE)
    (status,) = pod.status.container_statuses
    assert status.state.terminated.reason == "StartError"
    assert "/opt/nowhere/bin/app" in status.state.terminated.message
    assert "cannot start /opt/nowhere/bin/app" in (runner.root / "broken" / "log").read_text()
    assert "broken" not in runner.pods

    # The runner goes on: a failed start does not end its sync loop.
    await asyncio.to_thread(
        core.create_namespaced_pod, NAMESPACE, _pod("next", {"command": ["python", "-c", PROGRAM]})
    )

    async def serving() -> bool:
        return "next" in runner.pods and " mounted" in runner.pods["next"].log.read_text()

    await eventually_true(serving, "the next pod runs", 30)
    assert await _phase(core, "broken") == "Failed"  # not started again: restartPolicy Never
