"""A driver pod's container as a local process: what the pod runner starts.

The container's command and arguments run unchanged but for what only a
cluster has: Spark's Kubernetes master becomes local mode with one thread per
executor the pod asked for (a barrier stage of P tasks needs P slots); the
pod's volumes and scratch space become directories of the pod's own; its
fixed ports become free local ones, so drivers of several jobs share the host.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.operator.operator_process import free_port

# Conf that makes sense only with a cluster: the driver's address for executor pods, and pod settings.
CLUSTER_ONLY_CONF = (
    "spark.kubernetes.",
    "spark.driver.host",
    "spark.driver.bindAddress",
    "spark.driver.port",
    "spark.driver.blockManager.port",
)
SCRATCH = "/tmp"  # the container's writable scratch space
REPOSITORY = Path(__file__).resolve().parent.parent  # on PYTHONPATH as the image's /opt/lockgate/jobs is


@dataclass(frozen=True)
class LocalPod:
    argv: list[str]
    env: dict[str, str]
    metrics_port: int  # where the driver's metrics are served


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]  # driver pods have one container
    return dict(only)


def _spark_options(options: list[str]) -> list[str]:
    pairs = list(zip(options[::2], options[1::2], strict=True))  # spark-submit's `--flag value` pairs
    conf = dict(value.split("=", 1) for flag, value in pairs if flag == "--conf")
    slots = int(conf.get("spark.executor.instances", "1"))
    local: list[str] = []
    for flag, value in pairs:
        if flag == "--conf" and value.startswith(CLUSTER_ONLY_CONF):
            continue
        local += [flag, f"local[{slots}]" if flag == "--master" else value]
    return local


def _local_path(argument: str, paths: dict[str, Path]) -> str:
    for mount in sorted(paths, key=len, reverse=True):  # the innermost mount holds the path
        root = mount.rstrip("/")
        if argument == root or argument.startswith(f"{root}/"):
            return str(paths[mount]) + argument[len(root) :]
    return argument


def _driver_options(arguments: list[str], paths: dict[str, Path], metrics_port: int) -> list[str]:
    ports = {
        "--metrics-port": str(metrics_port),
        "--task-metrics-ports": "0",  # tasks of one local driver share the host: each takes any free port
    }
    flags = ["", *arguments[:-1]]  # the flag before each argument
    return [
        ports.get(flag) or _local_path(argument, paths)
        for flag, argument in zip(flags, arguments, strict=True)
    ]


def local_pod(pod: dict[str, Any], mounts: dict[str, Path], scratch: Path) -> LocalPod:
    """`mounts`: each volume's mount path -> the directory standing in for it."""
    spec = container(pod)
    command, arguments = list(spec["command"]), list(spec.get("args", []))
    if command[0] == "python":
        command[0] = sys.executable  # the image's Python is this one, with Lockgate installed
    split = arguments.index("--")
    metrics_port = free_port()
    paths = {**mounts, SCRATCH: scratch}
    argv = [
        *command,
        *_spark_options(arguments[:split]),
        "--",
        *_driver_options(arguments[split + 1 :], paths, metrics_port),
    ]
    env = {**os.environ, **{e["name"]: e["value"] for e in spec.get("env", []) if "value" in e}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return LocalPod(argv, env, metrics_port)
