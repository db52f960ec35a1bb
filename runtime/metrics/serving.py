"""Serving a registry for Prometheus on the first free port of a range.

Several tasks of a job may share a host (local runs, or more cores than one per
executor), so each takes the first port of the range that is free; on
Kubernetes, with one task per executor pod, every task gets the first.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PortRange:
    first: int
    last: int

    @staticmethod
    def parse(text: str) -> PortRange:
        """`9250` or `9250-9259`; `0` asks for any free port."""
        first, dash, last = text.partition("-")
        try:
            ports = PortRange(int(first), int(last) if dash else int(first))
        except ValueError:
            raise ValueError(f"metrics port range {text!r} is not PORT or FIRST-LAST") from None
        if not 0 <= ports.first <= ports.last <= 65535:
            raise ValueError(f"metrics port range {text!r} must lie within 0-65535, first <= last")
        return ports

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(registry: CollectorRegistry, ports: PortRange, host: str) -> MetricsServer | None:
    """Serve `registry` at /metrics on the first free port of `ports`; None (and a
    warning: metrics are not worth failing a job for) when every one is taken."""
    for port in range(ports.first, ports.last + 1):
        with contextlib.suppress(OSError):  # taken: try the next
            return MetricsServer(*start_http_server(port, host, registry))
    log.warning("no free port in %s on %s: these metrics are not served", ports, host)
    return None
