"""The emulated kubelet's pieces, without Spark: a container's environment as the
kubelet builds it, the cluster's names, a pod's command as it runs here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import e2e.local_pod as local_pod_module
from e2e.local_pod import ENTRYPOINT, Node, local_pod
from e2e.pod_env import MissingSourceError, container_env, expand
from e2e.pod_network import PodNetwork

DATA = {("configMap", "settings"): {"LEVEL": "debug", "MODE": "fast"}, ("secret", "s3"): {"KEY": "k"}}


async def _read(kind: str, name: str) -> dict[str, str] | None:
    return DATA.get((kind, name))


def _pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    metadata = {"name": "exec-1", "namespace": "ns", "uid": "u-1", "labels": {"role": "executor"}}
    return {"metadata": metadata, "spec": {"containers": [container], **spec}}


def test_references_expand_to_defined_variables_only() -> None:
    assert expand("$(A)/$(B)/$$(A)", {"A": "x"}) == "x/$(B)/$(A)"


async def test_a_container_env_resolves_the_downward_api_config_maps_and_secrets() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "KEY"}}},
            {"name": "URL", "value": "http://$(IP):80/$(APP_MODE)"},
            {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y", "optional": True}}},
        ],
    }
    env = await container_env(_pod(container), container, "127.0.0.7", _read)
    assert env == {
        "APP_LEVEL": "debug",
        "APP_MODE": "fast",
        "IP": "127.0.0.7",
        "NAME": "exec-1",
        "ROLE": "executor",
        "KEY": "k",
        "URL": "http://127.0.0.7:80/fast",
    }


async def test_a_missing_config_map_keeps_the_pod_waiting() -> None:
    container = {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "a"}}}]}
    with pytest.raises(MissingSourceError, match="later"):
        await container_env(_pod(container), container, "127.0.0.7", _read)


def test_pods_get_addresses_of_their_own_and_services_resolve_to_the_pods_they_select(tmp_path: Path) -> None:
    network = PodNetwork(tmp_path / "hosts")
    driver_ip, executor_ip = network.allocate(), network.allocate()
    assert (driver_ip, executor_ip) == ("127.0.0.2", "127.0.0.3")
    driver = {"metadata": {"name": "job-driver-1", "labels": {"job": "j", "component": "driver"}}}
    executor = {"metadata": {"name": "job-exec-1", "labels": {"job": "j", "component": "executor"}}}
    service = {
        "metadata": {"name": "job-driver", "namespace": "ns"},
        "spec": {"selector": {"component": "driver"}},
    }
    network.write({"job-driver-1": (driver_ip, driver), "job-exec-1": (executor_ip, executor)}, [service])
    lines = (tmp_path / "hosts").read_text().splitlines()
    assert lines[0].startswith("127.0.0.1 localhost ")
    assert lines[1:] == [
        "127.0.0.2 job-driver-1",
        "127.0.0.3 job-exec-1",
        "127.0.0.2 job-driver.ns.svc job-driver.ns.svc.cluster.local",
    ]


NODE = Node("http://127.0.0.1:8080", "-Djdk.net.hosts.file=/hosts")


def test_an_executor_pod_runs_the_image_entrypoint_with_its_args_and_mounts(tmp_path: Path) -> None:
    container = {"name": "executor", "args": ["executor"]}
    mounts = {"/opt/spark/conf": tmp_path / "conf", "/var/data/spark-1": tmp_path / "local"}
    env = {"SPARK_CONF_DIR": "/opt/spark/conf", "SPARK_LOCAL_DIRS": "/var/data/spark-1", "X": "-Da=b"}
    pod = local_pod(_pod(container), env, "127.0.0.3", mounts=mounts, scratch=tmp_path / "tmp", node=NODE)
    assert pod.argv == ["bash", str(ENTRYPOINT), "executor"]
    assert pod.metrics_port is None
    assert pod.env["SPARK_CONF_DIR"] == str(tmp_path / "conf")
    assert pod.env["SPARK_LOCAL_DIRS"] == str(tmp_path / "local")
    assert (pod.env["X"], pod.env["SPARK_LOCAL_IP"], pod.env["HOSTNAME"]) == ("-Da=b", "127.0.0.3", "exec-1")
    assert pod.env["JAVA_TOOL_OPTIONS"] == NODE.java_options
    assert pod.env["SPARK_LOCAL_HOSTNAME"] == "127.0.0.3", "names only the JVM resolves reach no Python task"


def test_a_driver_pod_keeps_the_kubernetes_master_at_the_emulated_api_server(tmp_path: Path) -> None:
    args = [
        *("--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "client"),
        *("--conf", "spark.driver.bindAddress=0.0.0.0", "--conf", "spark.driver.host=job-driver.ns.svc"),
        *("--conf", "spark.kubernetes.executor.podTemplateFile=/etc/lockgate/template.yaml"),
        *("--", "/etc/lockgate/job.yaml", "--metrics-port", "9249", "--task-metrics-ports", "9250"),
        *("--work-dir", "/tmp/lockgate"),
    ]
    command = ["python", "-m", "lockgate.runtime.driver.submit"]
    container = {"name": "driver", "command": command, "args": args}
    mounts = {"/etc/lockgate": tmp_path / "job"}
    pod = local_pod(_pod(container), {}, "127.0.0.2", mounts=mounts, scratch=tmp_path / "tmp", node=NODE)
    assert pod.metrics_port is not None
    assert pod.argv[3:] == [
        *("--master", "k8s://http://127.0.0.1:8080", "--deploy-mode", "client"),
        *("--conf", "spark.driver.bindAddress=127.0.0.2", "--conf", "spark.driver.host=job-driver.ns.svc"),
        *("--conf", f"spark.kubernetes.executor.podTemplateFile={tmp_path}/job/template.yaml"),
        *("--", f"{tmp_path}/job/job.yaml", "--metrics-port", str(pod.metrics_port)),
        *("--task-metrics-ports", "0", "--work-dir", f"{tmp_path}/tmp/lockgate"),
    ]


def test_this_checkout_and_python_stay_put_under_the_containers_scratch_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout under /tmp (a clean clone there) has its Python and entrypoint under
    the container's scratch path: only the pod's own paths move, never these."""
    monkeypatch.setattr(sys, "executable", "/tmp/clone/.venv/bin/python")
    monkeypatch.setattr(local_pod_module, "ENTRYPOINT", Path("/tmp/clone/docker/entrypoint.sh"))
    scratch = tmp_path / "tmp"
    driver = {"name": "driver", "command": ["python", "-m", "x"], "args": ["/tmp/work"]}
    pod = local_pod(_pod(driver), {}, "127.0.0.2", mounts={}, scratch=scratch, node=NODE)
    assert pod.argv == ["/tmp/clone/.venv/bin/python", "-m", "x", f"{scratch}/work"]
    executor = {"name": "executor", "args": ["executor", "/tmp/x"]}
    pod = local_pod(_pod(executor), {}, "127.0.0.3", mounts={}, scratch=scratch, node=NODE)
    assert pod.argv == ["bash", "/tmp/clone/docker/entrypoint.sh", "executor", f"{scratch}/x"]
