"""The TCP proxy of the fault tests: forwards connections to a target and can
blackhole them, or inject bytes into them.

`blackhole()` keeps every connection open on both sides but forwards nothing
more in either direction: what a silent partition looks like to both ends —
no reset, no FIN, only silence, while what they send piles up in socket
buffers. `heal()` forwards again, and nothing held back is lost. Once
`blackhole()` returns, not one more byte of a silenced connection goes through
until `heal()`. Connections accepted later are silenced too, unless the
blackhole was asked for the open connections only (a relaunch's connections
then pass, as after a partition that healed for the new launch).

Bounded: at most `max_connections` connections at a time (more are closed at
once), every wait is at most `POLL_S`, and after `lifetime_s` (unless None) the
proxy closes everything by itself, so a test that fails before `close()` leaves
no thread behind for long.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType
from typing import Literal

POLL_S = 0.05
CHUNK_BYTES = 64 * 1024

Direction = Literal["to_target", "from_target"]


class _Pump:
    """Copies one direction of one connection while its connection's `forwarding` is
    set; `lock` is held around each forward."""

    def __init__(
        self, source: socket.socket, target: socket.socket, direction: Direction, forwarding: threading.Event
    ) -> None:
        self.source = source
        self.target = target
        self.direction = direction
        self.forwarding = forwarding
        self.lock = threading.Lock()
        self.ended = False


class TcpProxy:
    def __init__(
        self,
        target: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        lifetime_s: float | None = 120.0,
        max_connections: int = 64,
    ) -> None:
        self.target = target
        self._max_connections = max_connections
        self._deadline = None if lifetime_s is None else time.monotonic() + lifetime_s
        self._silence_new = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pumps: list[_Pump] = []
        self._sockets: list[socket.socket] = []
        self._forwarded: dict[Direction, int] = {"to_target": 0, "from_target": 0}
        self._listener = socket.create_server(listen, backlog=max_connections)
        self._listener.settimeout(POLL_S)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._threads = [threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)]
        self._threads[0].start()

    # -- faults ----------------------------------------------------------------------

    def blackhole(self, *, new_connections: bool = True) -> int:
        """Forward nothing more, in either direction, until `heal()`; connections stay
        open. `new_connections=False` silences only the connections open now. The
        number of open connections silenced."""
        with self._lock:
            self._silence_new = new_connections
            pumps = [p for p in self._pumps if not p.ended]
            for pump in pumps:
                pump.forwarding.clear()
        for pump in pumps:  # wait out a forward that began before
            with pump.lock:
                pass
        return len({id(p.forwarding) for p in pumps})

    def heal(self) -> None:
        """Forward again, starting with what was held back."""
        with self._lock:
            self._silence_new = False
            for pump in self._pumps:
                pump.forwarding.set()

    def inject(self, direction: Direction, data: bytes) -> int:
        """Send `data` to the receiving end of `direction` of every open connection,
        between two forwarded chunks: what an attacker on the path can do. The number
        of connections it went into."""
        with self._lock:
            pumps = [p for p in self._pumps if p.direction == direction and not p.ended]
        for pump in pumps:
            with pump.lock:
                pump.target.sendall(data)
        return len(pumps)

    # -- inspection ------------------------------------------------------------------

    def forwarded(self, direction: Direction) -> int:
        """Bytes forwarded so far in `direction`, over every connection."""
        with self._lock:
            return self._forwarded[direction]

    @property
    def connections(self) -> int:
        """Connections open now (a pair of pumps, one of them still running)."""
        with self._lock:
            pairs = zip(self._pumps[::2], self._pumps[1::2], strict=True)
            return sum(1 for there, back in pairs if not (there.ended and back.ended))

    # -- running ---------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed.is_set() and (self._deadline is None or time.monotonic() < self._deadline):
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            self._admit(client)
        self._shut()

    def _admit(self, client: socket.socket) -> None:
        if self.connections >= self._max_connections:
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=POLL_S * 20)
        except OSError:
            client.close()
            return
        forwarding = threading.Event()
        pumps = [
            _Pump(client, upstream, "to_target", forwarding),
            _Pump(upstream, client, "from_target", forwarding),
        ]
        with self._lock:
            if not self._silence_new:
                forwarding.set()
            self._sockets += [client, upstream]
            self._pumps += pumps
        for sock in (client, upstream):
            sock.settimeout(POLL_S)
        for pump in pumps:
            thread = threading.Thread(target=self._pump, args=(pump,), name="proxy-pump", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _pump(self, pump: _Pump) -> None:
        pending = memoryview(b"")
        while not self._closed.is_set():
            if not pending:
                # Blackholed: read nothing, so what the peer sends stays in its buffers.
                if not pump.forwarding.wait(POLL_S):
                    continue
                try:
                    data = pump.source.recv(CHUNK_BYTES)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                pending = memoryview(data)
            sent = self._forward(pump, pending)
            if sent is None:
                break
            pending = pending[sent:]
        # One side ended: so does the connection, as a direct one would.
        for sock in (pump.source, pump.target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            pump.ended = True

    def _forward(self, pump: _Pump, data: memoryview) -> int | None:
        """Bytes of `data` forwarded now (0 while blackholed); None if the target is gone."""
        with pump.lock:
            if not pump.forwarding.is_set():
                sent = 0
            else:
                try:
                    sent = pump.target.send(data)
                except TimeoutError:
                    sent = 0
                except OSError:
                    return None
                with self._lock:
                    self._forwarded[pump.direction] += sent
        if not pump.forwarding.is_set():
            pump.forwarding.wait(POLL_S)
        return sent

    def _shut(self) -> None:
        self._listener.close()  # first: once a connection ends, no new one is accepted
        self._closed.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close every connection and wait for the proxy's threads (each within `POLL_S`)."""
        self._shut()
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout=POLL_S * 20)
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
