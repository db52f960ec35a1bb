"""The TCP exchange: authentication before anything is read, credits, closed peers."""

from __future__ import annotations

import logging
import pickle
import socket
import struct
import threading
from pathlib import Path

import pytest
from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.engine.events import Barrier, EndOfStream, OvertakingBarrier
from lockgate.runtime.engine.handshake import MAGIC, NONCE_BYTES, AuthenticationError, ChannelId
from lockgate.runtime.engine.network import ChannelClosedError, ExchangeServer, RemoteOutputChannel

SECRET = b"s" * 32
CHANNEL = ChannelId("job", 1, "count", 0, 1)


class Exploit:
    """Unpickling this would create a file: proof that a payload was deserialized."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def server():
    server = ExchangeServer(SECRET)
    yield server
    server.close()


def _connected(server, capacity: int):
    """A started server with one expected channel, and its connected sending end."""
    wakeup = threading.Event()
    inbound = server.expect(CHANNEL, capacity, wakeup)
    server.start()
    outbound = RemoteOutputChannel(server.address, CHANNEL, SECRET, threading.Event())
    outbound.connect()
    return inbound, outbound, wakeup


def _poll_until(channel, wakeup: threading.Event):
    while (element := channel.poll()) is None:
        assert wakeup.wait(10), "nothing arrived within 10 s"
        wakeup.clear()
    return element


def test_records_and_end_of_stream_arrive_in_order(server) -> None:
    inbound, outbound, wakeup = _connected(server, 4)
    for batch in range(10):
        outbound.send([("k", batch)])
        assert _poll_until(inbound, wakeup) == [("k", batch)]
    outbound.send(EndOfStream())
    assert _poll_until(inbound, wakeup) == EndOfStream()


def test_peer_without_the_secret_is_refused_and_nothing_it_sent_is_deserialized(
    server, tmp_path: Path, caplog
) -> None:
    wakeup = threading.Event()
    inbound = server.expect(CHANNEL, 4, wakeup)
    server.start()
    marker = tmp_path / "deserialized"
    payload = pickle.dumps([Exploit(str(marker))])
    with caplog.at_level(logging.WARNING), socket.create_connection(server.address) as attacker:
        greeting = attacker.recv(len(MAGIC) + NONCE_BYTES)
        assert greeting.startswith(MAGIC)
        channel = CHANNEL.encode()
        forged = struct.pack(">H", len(channel)) + channel + b"\0" * 32
        attacker.sendall(forged + struct.pack(">I", len(payload)) + payload)
        try:
            granted = attacker.recv(4)
        except ConnectionResetError:  # closed with our payload unread: a reset
            granted = b""
        assert granted == b"", "the server hangs up without granting credit"
    assert server.refused == 1
    assert "refused exchange connection from 127.0.0.1" in caplog.text
    assert "MAC does not match" in caplog.text
    assert inbound.poll() is None
    assert not marker.exists()
    assert not inbound.attached.is_set()


def test_a_wrong_secret_names_the_likely_cause(server) -> None:
    server.expect(CHANNEL, 4, threading.Event())
    server.start()
    outbound = RemoteOutputChannel(server.address, CHANNEL, b"other" * 8, threading.Event())
    with pytest.raises(AuthenticationError, match="same job secret"):
        outbound.connect()


def test_a_sender_without_credit_blocks_until_the_receiver_consumes(server) -> None:
    inbound, outbound, wakeup = _connected(server, 3)
    for batch in range(3):
        outbound.send([batch])
    fourth_sent = threading.Event()
    sender = threading.Thread(target=lambda: (outbound.send([3]), fourth_sent.set()))
    sender.start()
    assert not fourth_sent.wait(0.3), "a fourth frame went out with only three credits"
    assert _poll_until(inbound, wakeup) == [0]
    assert fourth_sent.wait(10), "the returned credit released the sender"
    sender.join()
    assert [_poll_until(inbound, wakeup) for _ in range(3)] == [[1], [2], [3]]


def test_a_peer_lost_mid_stream_fails_the_receiving_task(server) -> None:
    inbound, outbound, wakeup = _connected(server, 4)
    outbound.send([1])
    outbound.close()
    assert _poll_until(inbound, wakeup) == [1]
    with pytest.raises(ChannelClosedError, match="closed before the end of its stream"):
        _poll_until(inbound, wakeup)


def test_a_channel_nobody_expects_is_refused(server, caplog) -> None:
    server.start()
    outbound = RemoteOutputChannel(server.address, CHANNEL, SECRET, threading.Event())
    with caplog.at_level(logging.WARNING), pytest.raises(AuthenticationError):
        outbound.connect()
    assert "no such channel here" in caplog.text


def test_a_closed_server_frees_its_port_and_its_thread() -> None:
    """An executor runs launch after launch in one Python worker: a server left
    listening would take connections meant for nobody and keep a thread forever."""

    def accepting() -> int:
        return sum(t.name == "exchange-accept" for t in threading.enumerate())

    before = accepting()
    server = ExchangeServer(SECRET)
    server.start()
    address = server.address
    server.close()
    assert accepting() == before
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=5).close()


def test_an_overtaking_barrier_takes_no_credit_and_arrives_ahead_of_what_the_receiver_holds(server) -> None:
    inbound, outbound, wakeup = _connected(server, 2)
    outbound.send(["r1"])
    outbound.send(["r2"])  # every credit taken: a plain send would now block
    barrier = Barrier(Trigger(7, 1, "checkpoint", "file:///chk-7", 0, False))
    outbound.send_overtaking(barrier, ["partial"])
    before = []  # what the receiver read before the barrier reached it
    while not isinstance(first := _poll_until(inbound, wakeup), OvertakingBarrier):
        before.append(first)
    assert first.barrier == barrier
    overtaken = [pickle.loads(frame) for frame in first.overtaken]
    assert before + overtaken == [["r1"], ["r2"], ["partial"]], "it overtook exactly what was still queued"
    assert [_poll_until(inbound, wakeup) for _ in overtaken] == overtaken, "which is still read, after it"
    # Two credits came back (the carried frame took none): two sends go through.
    outbound.send(["r3"])
    outbound.send(["r4"])
    assert [_poll_until(inbound, wakeup) for _ in range(2)] == [["r3"], ["r4"]]
