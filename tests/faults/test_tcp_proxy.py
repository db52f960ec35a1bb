"""The fault proxy itself: it forwards, it blackholes without closing, it heals without
losing a byte, and it stops by itself."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.tcp_proxy import TcpProxy
from tests.polling import eventually

QUIET_S = 0.5
"""How long a blackholed connection is watched for a byte or a close that must not come."""


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A real TCP server that echoes every connection until its peer closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        conn.settimeout(0.05)
        with conn:
            while not stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield listener.getsockname()[:2]
    stop.set()
    acceptor.join(timeout=5)
    listener.close()


def _receive(sock: socket.socket, size: int, timeout_s: float = 5.0) -> bytes:
    sock.settimeout(timeout_s)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the connection closed after {len(data)} of {size} bytes"
        data += chunk
    return data


async def test_it_forwards_both_directions(echo) -> None:
    with TcpProxy(echo) as proxy, socket.create_connection(proxy.address) as client:
        client.sendall(b"hello")
        assert _receive(client, 5) == b"hello"
        assert proxy.connections == 1
        # Counted just after each send: the echo may overtake the count.
        await eventually(lambda: proxy.forwarded("from_target") == 5, "5 bytes are counted back")
        assert proxy.forwarded("to_target") == 5


def test_a_blackhole_forwards_nothing_closes_nothing_and_heal_loses_nothing(echo) -> None:
    with TcpProxy(echo) as proxy, socket.create_connection(proxy.address) as client:
        client.sendall(b"before")
        assert _receive(client, 6) == b"before"
        proxy.blackhole()
        payload = bytes(range(256)) * 1024
        client.sendall(payload)
        client.settimeout(QUIET_S)
        with pytest.raises(TimeoutError):  # neither a byte nor a close comes back
            client.recv(1)
        assert proxy.forwarded("to_target") == 6
        assert proxy.connections == 1
        proxy.heal()
        assert _receive(client, len(payload)) == payload


def test_it_closes_everything_by_itself_at_the_end_of_its_lifetime(echo) -> None:
    proxy = TcpProxy(echo, lifetime_s=1.0)
    try:
        with socket.create_connection(proxy.address) as client:
            started = time.monotonic()
            client.settimeout(5.0)
            assert client.recv(1) == b"", "the proxy closed the connection"
            assert time.monotonic() - started < 3.0
        with pytest.raises(ConnectionRefusedError), socket.create_connection(proxy.address, timeout=1.0):
            pass
    finally:
        proxy.close()


def test_connections_beyond_the_bound_are_closed_at_once(echo) -> None:
    with TcpProxy(echo, max_connections=1) as proxy, contextlib.ExitStack() as stack:
        first = stack.enter_context(socket.create_connection(proxy.address))
        first.sendall(b"x")
        assert _receive(first, 1) == b"x"
        second = stack.enter_context(socket.create_connection(proxy.address))
        second.settimeout(5.0)
        with contextlib.suppress(ConnectionResetError):
            assert second.recv(1) == b""


def test_a_blackhole_of_the_open_connections_lets_a_new_one_pass(echo) -> None:
    """As the soak partitions a launch's exchange: the relaunch's connections pass."""
    with TcpProxy(echo) as proxy, socket.create_connection(proxy.address) as old:
        old.sendall(b"a")
        assert _receive(old, 1) == b"a"
        assert proxy.blackhole(new_connections=False) == 1
        old.sendall(b"held")
        with socket.create_connection(proxy.address) as new:
            new.sendall(b"new")
            assert _receive(new, 3) == b"new"
        old.settimeout(QUIET_S)
        with pytest.raises(TimeoutError):
            old.recv(1)
        proxy.heal()
        assert _receive(old, 4) == b"held"


def test_a_full_blackhole_silences_connections_opened_after_it(echo) -> None:
    with TcpProxy(echo) as proxy:
        assert proxy.blackhole() == 0
        with socket.create_connection(proxy.address) as late:
            late.sendall(b"late")
            late.settimeout(QUIET_S)
            with pytest.raises(TimeoutError):
                late.recv(1)
            proxy.heal()
            assert _receive(late, 4) == b"late"
