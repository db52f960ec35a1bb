"""The exchange against an attacker on the pod network: frames injected on the
path, an endpoint that does not hold the secret, and peers that open connections
and say nothing. Nothing an attacker sends is ever deserialized, and a silent
peer holds a handshake thread only until the deadline."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime.engine.channels import ChannelClosedError
from lockgate.runtime.engine.frame_seal import MAC_BYTES, FrameAuthenticationError, Opener, Sealer
from lockgate.runtime.engine.handshake import MAGIC, NONCE_BYTES, AuthenticationError, ChannelId
from lockgate.runtime.engine.liveness import Liveness
from lockgate.runtime.engine.network import ExchangeServer, RemoteOutputChannel

from tests.faults.tcp_proxy import TcpProxy
from tests.polling import wait_until
from tests.runtime.engine.test_network import Exploit

SECRET = b"s" * 32
CHANNEL = ChannelId("job", 1, "count", 0, 1)
QUIET = Liveness(60.0, 30.0)  # no heartbeat in the middle of what a test injects


def _poll(channel, wakeup: threading.Event):
    while (element := channel.poll()) is None:
        assert wakeup.wait(10), "nothing arrived within 10 s"
        wakeup.clear()
    return element


@pytest.fixture
def server() -> Iterator[ExchangeServer]:
    server = ExchangeServer(SECRET, liveness=QUIET, handshake_deadline_s=1.0)
    yield server
    server.close()


@contextlib.contextmanager
def _through_a_proxy(server: ExchangeServer) -> Iterator[tuple[TcpProxy, RemoteOutputChannel]]:
    """The server started, and a channel to it connected through an on-path proxy."""
    server.start()
    with TcpProxy(server.address) as proxy:
        outbound = RemoteOutputChannel(proxy.address, CHANNEL, SECRET, threading.Event(), QUIET)
        outbound.connect()
        try:
            yield proxy, outbound
        finally:
            outbound.close()


def test_a_frame_injected_on_the_path_fails_the_channel_unread(
    server: ExchangeServer, tmp_path: Path
) -> None:
    wakeup = threading.Event()
    inbound = server.expect(CHANNEL, 4, wakeup)
    with _through_a_proxy(server) as (proxy, outbound):
        outbound.send([("k", 1)])
        assert _poll(inbound, wakeup) == [("k", 1)]
        marker = tmp_path / "deserialized"
        payload = pickle.dumps([Exploit(str(marker))])
        forged = struct.pack(">I", len(payload)) + payload + os.urandom(MAC_BYTES)
        assert proxy.inject("to_target", forged) == 1
        with pytest.raises(ChannelClosedError, match="does not carry the sender's MAC"):
            _poll(inbound, wakeup)
    assert not marker.exists(), "the injected pickle was deserialized"


def test_credits_injected_on_the_path_fail_the_sender(server: ExchangeServer) -> None:
    inbound = server.expect(CHANNEL, 1, threading.Event())
    with _through_a_proxy(server) as (proxy, outbound):
        outbound.send([1])  # its one credit spent: the next send waits for a grant
        proxy.inject("from_target", struct.pack(">I", 1000) + os.urandom(MAC_BYTES))
        with pytest.raises(ChannelClosedError, match="does not carry the sender's MAC"):
            outbound.send([2])  # no forged credit releases it: the channel fails
        inbound.close()


def test_an_endpoint_without_the_secret_gets_nothing_but_the_handshake(tmp_path: Path) -> None:
    """Someone listening where a task's peer is expected (a stale address, a spoofed
    name) cannot prove the secret; the sender fails and sends no frame."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def impostor() -> None:
        sock, _ = listener.accept()
        with sock:
            sock.sendall(MAGIC + os.urandom(NONCE_BYTES))
            sock.settimeout(2.0)
            received.append(sock.recv(4096))  # the answer to its challenge
            sock.sendall(os.urandom(MAC_BYTES))  # a proof it cannot make
            try:
                while data := sock.recv(4096):
                    received.append(data)
            except TimeoutError:
                pass

    thread = threading.Thread(target=impostor)
    thread.start()
    outbound = RemoteOutputChannel(listener.getsockname()[:2], CHANNEL, SECRET, threading.Event())
    with pytest.raises(AuthenticationError, match="did not prove it holds the job's secret"):
        outbound.connect()
    thread.join()
    listener.close()
    (answer,) = received  # nothing after the answer to the challenge
    assert CHANNEL.encode() in answer


def test_silent_peers_are_dropped_at_the_handshake_deadline_and_a_task_still_connects(
    server: ExchangeServer,
) -> None:
    wakeup = threading.Event()
    inbound = server.expect(CHANNEL, 4, wakeup)
    server.start()
    threads_before = threading.active_count()
    with _silent_peers(server, 40):
        started = time.monotonic()
        outbound = RemoteOutputChannel(server.address, CHANNEL, SECRET, threading.Event(), QUIET)
        outbound.connect()
        assert time.monotonic() - started < 1.0, "the task's own channel waited behind the silent peers"
        wait_until(lambda: server.refused == 40, "every silent peer is refused", timeout_s=5)
        # A refused peer's thread is counted before it closes the socket and ends.
        wait_until(
            lambda: threading.active_count() <= threads_before + 4,
            "handshake threads left behind",
            timeout_s=5,
        )
        assert time.monotonic() - started < 3.0, "a silent peer held its thread past the 1 s deadline"
        _delivers(outbound, inbound, wakeup)


def test_beyond_the_pending_cap_peers_are_turned_away_and_a_task_retries_until_admitted(
    server: ExchangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lockgate.runtime.engine.network.MAX_PENDING_HANDSHAKES_PER_HOST", 8)
    wakeup = threading.Event()
    inbound = server.expect(CHANNEL, 4, wakeup)
    server.start()
    with _silent_peers(server, 12):
        wait_until(lambda: server.turned_away == 4, "the four beyond the cap are turned away", timeout_s=5)
        outbound = RemoteOutputChannel(server.address, CHANNEL, SECRET, threading.Event(), QUIET)
        outbound.connect(timeout_s=10)  # turned away until the silent ones reach their deadline
        assert server.turned_away > 4, "the task's connection came while the places were taken"
        _delivers(outbound, inbound, wakeup)


@contextlib.contextmanager
def _silent_peers(server: ExchangeServer, count: int) -> Iterator[None]:
    """`count` connections to `server` that never say a word, closed at the end."""
    silent = [socket.create_connection(server.address) for _ in range(count)]
    try:
        yield
    finally:
        for sock in silent:
            sock.close()


def _delivers(outbound: RemoteOutputChannel, inbound: Any, wakeup: threading.Event) -> None:
    """The channel carries a frame; then the sending end closes."""
    outbound.send([1])
    assert _poll(inbound, wakeup) == [1]
    outbound.close()


def test_a_message_is_accepted_only_once_in_its_place_and_direction() -> None:
    key, other = os.urandom(32), os.urandom(32)
    sealer = Sealer(key)
    first, second = sealer.seal(b"frame-0"), sealer.seal(b"frame-1")

    def opened(opener: Opener, wire: bytes) -> bool:
        try:
            opener.check(wire[-MAC_BYTES:], wire[:-MAC_BYTES])
        except FrameAuthenticationError:
            return False
        return True

    in_order = Opener(key, "test")
    assert opened(in_order, first)
    assert opened(in_order, second)
    assert not opened(in_order, second), "replayed"
    assert not opened(Opener(key, "test"), second), "out of order"
    assert not opened(Opener(other, "test"), first), "another connection's or direction's key"
    altered = b"frame-9" + first[-MAC_BYTES:]
    assert not opened(Opener(key, "test"), altered)
