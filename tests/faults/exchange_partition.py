"""A partition between the tasks of a job, made by TCP proxies on its exchange.

The runtime gives no way to put a proxy in front of a task's exchange server: it
binds an ephemeral port and publishes `LOCKGATE_EXCHANGE_HOST:port` to its peers
through Spark's barrier `allGather`. What it does give: the bind host
(`LOCKGATE_EXCHANGE_BIND`) and the advertised host are set apart. So the tasks
bind 127.0.0.1 and advertise `PROXY_HOST` (another loopback address); a watcher
finds each task's listening port on 127.0.0.1 and opens a proxy on
`PROXY_HOST:port` that forwards to it. A peer's connect to `PROXY_HOST:port`
is refused until then and retried by the runtime (for 30 s).

`blackhole()` stops every proxied connection open now from moving bytes in
either direction while keeping it open: a silent peer, as a partition leaves
it. Connections opened later (a relaunch's) pass. `heal()` lets bytes flow again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from tests.faults.tcp_proxy import TcpProxy

BIND_HOST = "127.0.0.1"
PROXY_HOST = "127.0.0.2"
_LISTEN = "0A"
_WATCH_S = 0.05


def exchange_environment() -> dict[str, str]:
    """What the driver's environment needs so that its tasks' exchange can be proxied."""
    return {"LOCKGATE_EXCHANGE_BIND": BIND_HOST, "LOCKGATE_EXCHANGE_HOST": PROXY_HOST}


def _listening_inodes() -> dict[int, int]:
    """socket inode -> port of every TCP socket listening on 127.0.0.1."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], int(fields[9])
        address, port = local.split(":")
        if state == _LISTEN and address == "0100007F":
            found[inode] = int(port, 16)
    return found


def _fd_links(pid: int) -> list[str]:
    """What each open descriptor of `pid` points to; descriptors closing meanwhile are skipped."""
    try:
        entries = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    links = []
    for entry in entries:
        try:
            links.append(os.readlink(entry))
        except OSError:
            continue
    return links


def listening_ports(pids: list[int] | None = None) -> set[int]:
    """Ports on 127.0.0.1 that any of `pids` (None: any process) listens on."""
    inodes = _listening_inodes()
    if pids is None:
        return set(inodes.values())
    ports = set()
    for pid in pids:
        for link in _fd_links(pid):
            if link.startswith("socket:["):
                port = inodes.get(int(link[8:-1]))
                if port is not None:
                    ports.add(port)
    return ports


class ExchangeProxies:
    """Keeps a proxy in front of every exchange server the task workers listen on."""

    def __init__(self, task_workers: Callable[[], list[int]]) -> None:
        self._task_workers = task_workers
        self._proxies: dict[int, TcpProxy] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._watch, daemon=True, name="exchange-proxies")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(_WATCH_S):
            ports = listening_ports(self._task_workers())
            listening = listening_ports()
            with self._lock:
                for port in ports - self._proxies.keys():
                    try:
                        self._proxies[port] = TcpProxy(
                            (BIND_HOST, port), listen=(PROXY_HOST, port), lifetime_s=None
                        )
                    except OSError as error:
                        self.errors.append(f"proxy for port {port}: {error}")
                # Only once nothing listens on the port any more: a task worker can
                # drop out of the list for a moment (between two reads of /proc).
                for port in self._proxies.keys() - listening:
                    self._proxies.pop(port).close()  # that task's server is gone

    def blackhole(self) -> int:
        """Partitions the tasks from each other: every proxied connection open now
        goes silent. The number of connections silenced."""
        with self._lock:
            return sum(proxy.blackhole(new_connections=False) for proxy in self._proxies.values())

    def heal(self) -> None:
        with self._lock:
            for proxy in self._proxies.values():
                proxy.heal()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        with self._lock:
            for proxy in self._proxies.values():
                proxy.close()
            self._proxies.clear()
