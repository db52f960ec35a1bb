"""The emulated cluster's network: each pod on a loopback address of its own
(127.0.0.2, 127.0.0.3, …) as its pod IP, and the names a cluster's DNS
answers — a pod's name, a Service's `<name>.<namespace>.svc` resolving to the
pods its selector picks — in a hosts file every pod's JVM reads
(`-Djdk.net.hosts.file`), rewritten as pods come and go.

The JVM reads that file instead of the system's resolver, so it also names the
machine itself (Spark asks for the local host's name)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FIRST_POD_IP = ipaddress.IPv4Address("127.0.0.2")  # 127.0.0.1 is the node's


class PodNetwork:
    def __init__(self, hosts_file: Path) -> None:
        self.hosts_file = hosts_file
        self._next = FIRST_POD_IP
        self._written: str | None = None
        self.write({}, [])

    def allocate(self) -> str:
        """A new pod's IP: never one given before, so a replaced pod is never mistaken for the old one."""
        ip = self._next
        self._next += 1
        return str(ip)

    def java_options(self) -> str:
        return f"-Djdk.net.hosts.file={self.hosts_file}"

    def write(
        self, pod_ips: dict[str, tuple[str, dict[str, Any]]], services: Iterable[dict[str, Any]]
    ) -> None:
        """`pod_ips`: each running pod's name -> (its IP, the pod); `services`: the namespace's Services."""
        lines = [f"127.0.0.1 localhost {socket.gethostname()}"]
        for name, (ip, _) in sorted(pod_ips.items()):
            lines.append(f"{ip} {name}")
        for service in services:
            selector = (service.get("spec") or {}).get("selector") or {}
            if not selector:
                continue
            metadata = service["metadata"]
            names = [
                f"{metadata['name']}.{metadata['namespace']}.svc{suffix}" for suffix in ("", ".cluster.local")
            ]
            for ip, pod in (entry for entry in pod_ips.values()):
                labels = pod["metadata"].get("labels") or {}
                if all(labels.get(key) == value for key, value in selector.items()):
                    lines.append(f"{ip} {' '.join(names)}")
        text = "\n".join(lines) + "\n"
        if text != self._written:
            partial = self.hosts_file.with_suffix(".partial")
            partial.write_text(text)
            os.replace(partial, self.hosts_file)  # a JVM reading it never sees half a file
            self._written = text
