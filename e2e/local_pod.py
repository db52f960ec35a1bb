"""A pod's container as a local process: what the pod runner starts.

The container runs as Kubernetes runs it: its `command` replaces the image's
entrypoint, else its `args` go to the image's entrypoint (docker/entrypoint.sh:
how Spark's executor pods start), `$(VAR)` expanded from its environment. Only
what stands in for the cluster changes: the pod's volumes and scratch space
become directories of the pod's own (paths in arguments and environment follow
them); the image's environment points at this checkout; the pod listens on its
own loopback address (its pod IP), and its JVMs resolve names through the
emulated cluster's hosts file. For the driver's command, the API server's
in-cluster address becomes the emulated one's URL, and its fixed metrics ports
become free local ones (tasks of every executor share the host).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from e2e.pod_env import expand
from tests.operator.operator_process import free_port

SCRATCH = "/tmp"  # the container's writable scratch space
REPOSITORY = Path(__file__).resolve().parent.parent  # on PYTHONPATH as the image's /opt/lockgate/jobs is
ENTRYPOINT = REPOSITORY / "docker" / "entrypoint.sh"
DRIVER_COMMAND = ["python", "-m", "lockgate.runtime.driver.submit"]
IN_CLUSTER_API_SERVER = "k8s://https://kubernetes.default.svc"
# The image's environment (Dockerfile), for this checkout and this Python.
IMAGE_ENV = {
    "SPARK_HOME": str(Path(pyspark.__file__).parent),
    "PYSPARK_PYTHON": sys.executable,
    "PYTHONPATH": str(REPOSITORY),
    "PYTHONUNBUFFERED": "1",
}


# Conf that makes sense only with executor pods: the driver's address for them, and pod settings.
CLUSTER_ONLY_CONF = (
    "spark.kubernetes.",
    "spark.driver.host",
    "spark.driver.bindAddress",
    "spark.driver.port",
    "spark.driver.blockManager.port",
)


@dataclass(frozen=True)
class Node:
    """What the pod runner's node gives every pod."""

    api_server: str  # the URL `kubernetes.default.svc` reaches
    java_options: str  # name resolution through the emulated cluster's hosts file
    executor_pods: bool = True
    """False: a driver's Spark runs its executors as local threads (`local[N]`, N the
    executors it asks for) instead of asking the API server for executor pods."""


@dataclass(frozen=True)
class LocalPod:
    argv: list[str]
    env: dict[str, str]
    metrics_port: int | None  # where the driver's metrics are served; None: not a driver


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]  # Lockgate's pods have one container
    return dict(only)


def _local_path(argument: str, paths: dict[str, Path]) -> str:
    """`argument` — a path, or `key=path` — with a mount's path replaced by its local directory."""
    key, equals, value = argument.rpartition("=")
    for mount in sorted(paths, key=len, reverse=True):  # the innermost mount holds the path
        root = mount.rstrip("/")
        if value == root or value.startswith(f"{root}/"):
            return f"{key}{equals}{paths[mount]}{value[len(root) :]}"
    return argument


def _local_mode(pairs: list[tuple[str, str]]) -> list[str]:
    conf = dict(value.split("=", 1) for flag, value in pairs if flag == "--conf")
    slots = int(conf.get("spark.executor.instances", "1"))  # a barrier stage of P tasks needs P slots
    local: list[str] = []
    for flag, value in pairs:
        if flag == "--conf" and value.startswith(CLUSTER_ONLY_CONF):
            continue
        local += [flag, f"local[{slots}]" if flag == "--master" else value]
    return local


def _spark_options(options: list[str], pod_ip: str, node: Node) -> list[str]:
    pairs = list(zip(options[::2], options[1::2], strict=True))  # spark-submit's `--flag value` pairs
    if not node.executor_pods:
        return _local_mode(pairs)
    local: list[str] = []
    replaced = {
        ("--master", IN_CLUSTER_API_SERVER): f"k8s://{node.api_server}",
        # All of a pod's interfaces: its pod IP.
        ("--conf", "spark.driver.bindAddress=0.0.0.0"): f"spark.driver.bindAddress={pod_ip}",
    }
    for flag, value in pairs:
        local += [flag, replaced.get((flag, value), value)]
    return local


def _driver_options(arguments: list[str], metrics_port: int) -> list[str]:
    ports = {
        "--metrics-port": str(metrics_port),
        "--task-metrics-ports": "0",  # executor pods share the host: each task takes any free port
    }
    flags = ["", *arguments[:-1]]  # the flag before each argument
    return [ports.get(flag) or argument for flag, argument in zip(flags, arguments, strict=True)]


def local_pod(
    pod: dict[str, Any],
    env: dict[str, str],
    pod_ip: str,
    *,
    mounts: dict[str, Path],
    scratch: Path,
    node: Node,
) -> LocalPod:
    """`env`: the container's environment (pod_env.py); `mounts`: each volume's
    mount path -> the directory standing in for it."""
    spec = container(pod)
    paths = {**mounts, SCRATCH: scratch}
    command = [expand(part, env) for part in spec.get("command") or []]
    arguments = [expand(part, env) for part in spec.get("args") or []]
    metrics_port = None
    if command == DRIVER_COMMAND and "--" in arguments:
        split = arguments.index("--")
        metrics_port = free_port()
        arguments = [
            *_spark_options(arguments[:split], pod_ip, node),
            "--",
            *_driver_options(arguments[split + 1 :], metrics_port),
        ]
    # Only the pod's own paths move to its directories: this checkout and this Python
    # stay where they are, even when they live under the container's scratch path (/tmp).
    pod_argv = [_local_path(part, paths) for part in [*command, *arguments]]
    if command and command[0] == "python":
        pod_argv[0] = sys.executable  # the image's Python is this one, with Lockgate installed
    argv = pod_argv if command else ["bash", str(ENTRYPOINT), *pod_argv]
    local_env = {
        # A pod gets none of the node's cloud credentials: only what its spec gives it.
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        **IMAGE_ENV,
        "HOSTNAME": pod["metadata"]["name"],
        "SPARK_LOCAL_IP": pod_ip,  # the pod's own address, as its hostname resolves on a cluster
        # Spark names the pod by its IP: only JVMs read the hosts file, and the Python tasks connect to
        # the addresses Spark gives them (in local mode, the driver's name would not resolve there).
        "SPARK_LOCAL_HOSTNAME": pod_ip,
        "JAVA_TOOL_OPTIONS": node.java_options,
        **{name: _local_path(value, paths) for name, value in env.items()},
    }
    local_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), local_env.get("PATH", "")])
    return LocalPod(argv, local_env, metrics_port)
