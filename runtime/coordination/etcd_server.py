"""An etcd server process on loopback ports: embedded in `lockgate run`, and in tests."""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path


class EtcdServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ended_with(parent: int) -> Callable[[], None]:
    """What the child runs before etcd: ask the kernel for SIGTERM when its parent
    ends (PR_SET_PDEATHSIG), and end at once if the parent already has. `prctl` is
    looked up here, in the parent: between fork and exec the child only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arrange() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0 or os.getppid() != parent:
            os._exit(1)  # without the arrangement etcd could outlive a killed run: not started

    return arrange


PR_SET_PDEATHSIG = 1
LINUX = sys.platform.startswith("linux")
HEARTBEAT_MS = 10
ELECTION_TIMEOUT_MS = 50
"""etcd's raft tick and election timeout for its one member (etcd wants the
timeout at least 5 ticks); the ticks cost an idle etcd about 1.5 % of a core
(0.4 % at etcd's defaults of 100 ms and 1 s)."""


class EtcdServer:
    """One etcd member with its data in `data_dir`; `restart()` keeps data and ports."""

    def __init__(
        self,
        data_dir: Path,
        client_port: int | None = None,
        tls: tuple[str, str, str] | None = None,
        *,
        dies_with_parent: bool = False,
    ) -> None:
        """`tls`: (CA file, server certificate, server key); clients must then present
        a certificate signed by that CA. `dies_with_parent`: the kernel ends etcd when
        the thread that launched it ends (Linux), so a run killed with SIGKILL leaves no
        etcd holding its data directory; launch it from a thread that lives as long as
        etcd should (the main thread)."""
        binary = shutil.which("etcd")
        if binary is None:
            raise EtcdServerError(
                "the etcd binary is not on PATH: install the Debian package etcd-server "
                "(scripts/install.sh does), or pass --etcd URL of a running etcd"
            )
        self._binary = binary
        self.data_dir = data_dir
        self._log = data_dir.parent / f"{data_dir.name}.log"
        self.client_port = client_port or free_port()
        self.peer_port = free_port()
        self._tls = tls
        self._dies_with_parent = dies_with_parent
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 20.0) -> None:
        self.launch()
        self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to serve (`wait_healthy`), so
        that other start-up work (a JVM) runs beside it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self._log, "ab")  # noqa: SIM115
        peer = f"http://127.0.0.1:{self.peer_port}"
        flags = {
            "--name": "lockgate",
            "--data-dir": str(self.data_dir),
            "--listen-client-urls": self.endpoint,
            "--advertise-client-urls": self.endpoint,
            "--listen-peer-urls": peer,
            "--initial-advertise-peer-urls": peer,
            "--initial-cluster": f"lockgate={peer}",
            # One member, no peers: the election timeout is only how long it waits
            # before electing itself when it starts on earlier data (etcd's default,
            # 1-2 s, was most of a `lockgate run --local` rerun's start-up); no peer
            # misses a heartbeat or calls an election.
            "--heartbeat-interval": str(HEARTBEAT_MS),
            "--election-timeout": str(ELECTION_TIMEOUT_MS),
        }
        command = [self._binary, *itertools.chain.from_iterable(flags.items())]
        if self._tls is not None:
            ca, cert, key = self._tls
            command += ["--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", ca]
        self._process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group: Ctrl-C in a terminal signals the whole foreground
            # group, and etcd must outlive the run's cleanup (lease revoked, status
            # written), to be stopped by `stop()` after it.
            process_group=0,
            # Linux only; elsewhere a killed run's etcd is left to the user, as before.
            preexec_fn=_ended_with(os.getpid()) if self._dies_with_parent and LINUX else None,  # noqa: PLW1509 - only prctl
        )
        log.close()

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise EtcdServerError(f"etcd exited with code {self._process.returncode}; see {self._log}")
            if self._answers():
                return
            time.sleep(0.01)  # polling a process we just started; nothing to wait on
        raise EtcdServerError(f"etcd at {self.endpoint} was not healthy after {timeout} s")

    def _answers(self) -> bool:
        if self._tls is not None:
            # /health needs a client certificate under TLS; a listening port will do.
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=1):
                    return True
            except OSError:
                return False
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as answer:
                return b'"health":"true"' in answer.read()
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        """Freeze etcd (SIGSTOP): connections stay open and go silent, as in a partition."""
        assert self._process is not None, "start() first"
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None, "start() first"
        self._process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None
