"""Telling a silent exchange peer from an idle one: heartbeats and a deadline per connection.

An idle channel is not a dead one. Each end of a connection sends a heartbeat
when it sent nothing else for `Liveness.heartbeat_s`, and fails the
connection once it heard nothing at all — data, credit or heartbeat — for
`Liveness.timeout_s`. So a stalled peer or a partition fails its task within
seconds, while a channel idle, backpressured or held for barrier alignment
for hours stays up.

The cost on a busy connection is a clock read per read and an uncontended
lock per write: sockets stay blocking with no timeout (a timeout would arm a
timer or poll(2) around every call), and one thread per process — the
ticker — does the rest for every connection, once per heartbeat interval:
a heartbeat where nothing went out, and for a connection silent past its
timeout, a `ChannelSilentError` recorded and the socket shut down, which
wakes its reader (and a writer stuck on a full socket) to raise it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import NoReturn

from lockgate.runtime.engine.channels import ChannelSilentError
from lockgate.runtime.engine.frame_seal import Sealer

log = logging.getLogger(__name__)

DEFAULT_LIVENESS_TIMEOUT_S = 10.0
HEARTBEATS_PER_TIMEOUT = 10
MIN_LIVENESS_TIMEOUT_S = 0.1
MAX_LIVENESS_TIMEOUT_S = 3600.0
KEEPALIVE_PROBES = 3
MAX_TICKER_WAIT_S = 1.0


def check_liveness_timeout(timeout_s: float, name: str) -> None:
    """Refuse a timeout heartbeats cannot keep (`name`: the option that set it)."""
    if not (math.isfinite(timeout_s) and MIN_LIVENESS_TIMEOUT_S <= timeout_s <= MAX_LIVENESS_TIMEOUT_S):
        raise ValueError(
            f"{name} must be between {MIN_LIVENESS_TIMEOUT_S:g} and {MAX_LIVENESS_TIMEOUT_S:g} "
            f"seconds, got {timeout_s}"
        )


@dataclass(frozen=True)
class Liveness:
    """When a connection's peer counts as gone: nothing heard from it for `timeout_s`.
    Each end sends a heartbeat after `heartbeat_s` without sending anything else."""

    timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S
    heartbeat_s: float = DEFAULT_LIVENESS_TIMEOUT_S / HEARTBEATS_PER_TIMEOUT

    def __post_init__(self) -> None:
        check_liveness_timeout(self.timeout_s, "the liveness timeout")
        if not 0 < self.heartbeat_s <= self.timeout_s / 2:
            raise ValueError(
                f"heartbeats every {self.heartbeat_s} s cannot keep a channel with a "
                f"{self.timeout_s} s timeout alive: send at least two per timeout"
            )

    @classmethod
    def from_timeout(cls, timeout_s: float) -> Liveness:
        """Ten heartbeats per timeout: nine in a row may be late before a channel fails."""
        return cls(timeout_s, timeout_s / HEARTBEATS_PER_TIMEOUT)


def configure_socket(sock: socket.socket, liveness: Liveness) -> None:
    """Blocking, no Nagle delay; and as a second line behind the heartbeats, at
    about twice their timeout, TCP keepalive and a user timeout, so the kernel
    itself fails a connection to a host that vanished."""
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; elsewhere the system's keepalive defaults
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, math.ceil(liveness.timeout_s))
        interval = math.ceil(liveness.timeout_s / KEEPALIVE_PROBES)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, math.ceil(2000 * liveness.timeout_s))


class Link:
    """One end of an exchange connection: serialized writes, reads that note the
    time, and a place in the ticker until the connection ends.

    One thread reads (`read_exactly`); any thread may `send`. `heartbeat` is the
    message the peer discards; `sealer` gives every message sent, heartbeats too,
    its MAC, in the order they go on the wire."""

    def __init__(
        self, sock: socket.socket, liveness: Liveness, name: str, heartbeat: bytes, sealer: Sealer
    ) -> None:
        configure_socket(sock, liveness)
        self._sock = sock
        self.liveness = liveness
        self.name = name
        self._heartbeat = heartbeat
        self._sealer = sealer
        self._writing = threading.Lock()
        self._wrote = False  # since the last tick
        self._unsent = b""  # the rest of a heartbeat the socket took only in part
        self._heard = time.monotonic()
        self.next_tick = self._heard + liveness.heartbeat_s
        self._failure: ChannelSilentError | None = None
        _TICKER.add(self)

    def send(self, data: bytes) -> None:
        with self._writing:
            wire = self._sealer.seal(data)
            if self._unsent:
                wire, self._unsent = self._unsent + wire, b""
            try:
                self._sock.sendall(wire)
            except OSError as error:
                self._raise_failure(error)
            self._wrote = True

    def read_exactly(self, size: int) -> bytes | None:
        """`size` bytes, or None if the peer closed the connection first; raises
        `ChannelSilentError` once the peer was silent for the timeout."""
        chunks: list[bytes] = []
        missing = size
        while missing:
            try:
                chunk = self._sock.recv(missing)
            except OSError as error:
                self._raise_failure(error)
            if not chunk:
                if self._failure is not None:
                    raise self._failure
                return None
            self._heard = time.monotonic()
            chunks.append(chunk)
            missing -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _raise_failure(self, error: OSError) -> NoReturn:
        """The silence that made the socket fail, if it was that; else `error`."""
        if self._failure is not None:
            raise self._failure from error
        raise error

    def tick(self, now: float) -> None:
        """The ticker's, once per heartbeat interval; never blocks."""
        self.next_tick = now + self.liveness.heartbeat_s
        silent = now - self._heard
        if silent > self.liveness.timeout_s:
            self._failure = ChannelSilentError(
                f"{self.name}: nothing heard for {silent:.1f} s (liveness timeout "
                f"{self.liveness.timeout_s:g} s): the peer task is stalled or the network "
                "between the tasks is partitioned"
            )
            _TICKER.remove(self)
            self._shutdown()  # wakes the reader, and a writer stuck on a full socket
            return
        # A writer holding the lock is sending already (or stuck on a full socket,
        # and then the peer would not read a heartbeat either).
        if (not self._wrote or self._unsent) and self._writing.acquire(blocking=False):
            try:
                self._send_heartbeat()
            finally:
                self._writing.release()
        self._wrote = False

    def _send_heartbeat(self) -> None:
        data = self._unsent or self._sealer.seal(self._heartbeat)
        try:
            sent = self._sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the connection failed: its reader says how
        self._unsent = data[sent:]

    def ended(self) -> None:
        """The reader saw the connection end: nothing left to keep alive."""
        _TICKER.remove(self)

    def _shutdown(self) -> None:
        with contextlib.suppress(OSError):  # not connected any more
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        _TICKER.remove(self)
        self._shutdown()  # close alone may not wake a thread blocked on the socket
        self._sock.close()


class _Ticker:
    """The thread that ticks every open `Link` of the process; it runs while there is one."""

    def __init__(self) -> None:
        self._forget()
        # A forked child (Spark forks Python workers) has none of the parent's
        # threads, and must not tick the parent's connections.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._links: set[Link] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, link: Link) -> None:
        with self._changed:
            self._links.add(link)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="exchange-ticker", daemon=True)
                self._thread.start()
            self._changed.notify()

    def remove(self, link: Link) -> None:
        with self._changed:
            self._links.discard(link)
            self._changed.notify()  # the last one gone: the thread ends now, not after its wait

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._links:
                    self._thread = None
                    return
                links = list(self._links)
                wait_s = min(link.next_tick for link in links) - time.monotonic()
                if wait_s > 0:
                    self._changed.wait(min(wait_s, MAX_TICKER_WAIT_S))
                    continue
            now = time.monotonic()
            for link in links:
                if now >= link.next_tick:
                    try:
                        link.tick(now)
                    except Exception:  # the other links still need their ticks
                        log.exception("liveness tick of %s failed", link.name)


_TICKER = _Ticker()
