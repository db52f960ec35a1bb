"""An external etcd the job runs against (`--etcd`), killed, paused and restarted
by the harness on the same data directory and client port."""

from __future__ import annotations

import time
from pathlib import Path

from lockgate.runtime.coordination.etcd_server import EtcdServer

from tests.faults import processes


def _etcd_pid(data_dir: Path) -> int | None:
    """The etcd serving `data_dir`, found by its command line."""
    wanted = f"--data-dir {data_dir} "
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.split(" ", 1)[0].endswith("etcd") and wanted in cmdline + " ":
            return int(entry.name)
    return None


class EtcdFaults:
    def __init__(self, server: EtcdServer) -> None:
        self.server = server

    def pid(self) -> int | None:
        return _etcd_pid(self.server.data_dir)

    def kill(self) -> None:
        """SIGKILL; `start()` brings it back with its data."""
        pid = self.pid()
        if pid is not None:
            processes.kill(pid)
        self.server.stop()  # reaps the killed process

    def start(self) -> None:
        self.server.start()

    def restart(self) -> None:
        """A graceful stop (SIGTERM) and a start on the same data and port."""
        self.server.restart()

    def pause(self) -> None:
        pid = self.pid()
        if pid is not None:
            processes.pause(pid)

    def resume(self) -> None:
        pid = self.pid()
        if pid is not None:
            processes.resume(pid)

    def ensure_running(self, timeout: float = 20.0) -> None:
        """Resume it if paused, start it if dead (the end of every etcd fault)."""
        self.resume()
        if not self.server.running:
            deadline = time.monotonic() + timeout
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # the killed process's port is freed when it is gone
            self.server.start(timeout)
