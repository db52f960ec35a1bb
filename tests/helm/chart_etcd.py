"""The chart's bundled etcd run here: a real etcd (Debian's etcd-server) started
with the etcd container's own command from the rendered chart and the
certificates the chart generated (its Secrets), the operator's config as the
chart's Deployment gives it, and the files a job's pod mounts. Only what cannot
exist outside a cluster is mapped: the pod's name, its DNS names and ports to
loopback, its mounted paths to a directory."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import free_port

from tests.helm.chart import find, operator_args
from tests.polling import wait_until

POD_NAME = "lockgate-etcd-0"
_URL = re.compile(r"(https?)://[^/,=]+:(2379|2380|2381)")


@dataclass(frozen=True)
class ChartEtcd:
    endpoint: str  # https://127.0.0.1:<port>, the chart's client URL on loopback
    operator: EtcdConfig  # as the chart's operator connects: its client certificate, root and password
    client_files: Path  # the client Secret's files, as drivers, executors and the operator mount them

    def without_certificate(self) -> EtcdConfig:
        """A client that knows etcd's CA and nothing else: any pod of the cluster."""
        return EtcdConfig(
            (self.endpoint,), ca_file=str(self.client_files / "ca.crt"), retries=2, request_timeout_s=2
        )

    def with_certificate(self, user: str | None = None, password: str | None = None) -> EtcdConfig:
        """A client holding the certificate the chart hands to jobs; `user`: as that etcd user."""
        return replace(self.operator, username=user, password=password, retries=2, request_timeout_s=2)


def _write_secret(secret: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True)
    for name, value in secret["data"].items():
        (directory / name).write_bytes(base64.b64decode(value))
    return directory


def _secret(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (secret,) = [s for s in find(objects, "Secret", name) if s["metadata"]["namespace"] == "lockgate-system"]
    return secret


def _option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@contextmanager
def chart_etcd(objects: list[dict[str, Any]], directory: Path) -> Iterator[ChartEtcd]:
    """Run the bundled etcd of the rendered `objects` until the block ends."""
    pod = find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (tls_volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    (tls_mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    (data_mount,) = [m for m in container["volumeMounts"] if m["name"] == "data"]
    server_files = _write_secret(_secret(objects, tls_volume["secret"]["secretName"]), directory / "server")
    ports = {"2379": free_port(), "2380": free_port(), "2381": free_port()}
    command = [
        _URL.sub(lambda m: f"{m[1]}://127.0.0.1:{ports[m[2]]}", arg)
        .replace("$(POD_NAME)", POD_NAME)
        .replace(tls_mount["mountPath"], str(server_files))
        .replace(data_mount["mountPath"], str(directory / "data"))
        for arg in container["command"]
    ]
    command[0] = shutil.which(command[0]) or command[0]

    args = operator_args(objects)
    client_secret = _option(args, "--etcd-tls-secret")
    client_files = _write_secret(_secret(objects, client_secret), directory / "client")
    password_secret = [e for e in _operator_env(objects) if e["name"] == "LOCKGATE_ETCD_PASSWORD"]
    password = base64.b64decode(
        _secret(objects, password_secret[0]["valueFrom"]["secretKeyRef"]["name"])["data"]["password"]
    ).decode()
    endpoint = f"https://127.0.0.1:{ports['2379']}"
    operator = EtcdConfig(
        (endpoint,),
        ca_file=_option(args, "--etcd-ca").replace("/etc/lockgate-etcd-tls", str(client_files)),
        cert_file=_option(args, "--etcd-cert").replace("/etc/lockgate-etcd-tls", str(client_files)),
        key_file=_option(args, "--etcd-key").replace("/etc/lockgate-etcd-tls", str(client_files)),
        username=_option(args, "--etcd-user"),
        password=password,
    )
    with open(directory / "etcd.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _healthy(ports["2381"], process), "the chart's etcd answers /health", 20, 0.05)
        yield ChartEtcd(endpoint, operator, client_files)
    finally:
        process.terminate()
        process.wait(10)


def _operator_env(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = find(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]
    return env


def _healthy(metrics_port: int, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"etcd exited with {process.returncode}"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health", timeout=1) as answer:
            return b'"health":"true"' in answer.read()
    except (urllib.error.URLError, OSError):
        return False
