"""Authenticating an exchange connection with the job's secret, both ways, before any payload.

The accepting side sends a fresh random nonce; the connecting side answers with
the channel it wants, a nonce of its own and HMAC-SHA256(secret, "C" + both
nonces + channel). Only after that MAC checks out does the acceptor read
anything else from the socket, and it proves itself in turn with the MAC over
"A" + the same; the connecting side sends nothing more until that checks out.
Both then derive a key per direction from the secret and both nonces: every
later message carries its MAC (`frame_seal.py`).

The whole handshake has a deadline, and a server admits a bounded number of
handshakes at a time: a silent or slow peer without the secret holds a thread
for seconds, never longer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import time
from dataclasses import dataclass

from lockgate.runtime.engine.frame_seal import MAC_BYTES

MAGIC = b"LGX2"
NONCE_BYTES = 32
MAX_CHANNEL_ID_BYTES = 1024
HANDSHAKE_DEADLINE_S = 5.0


class AuthenticationError(ConnectionError):
    """The peer did not prove it holds the job's secret."""


class HandshakeTimeoutError(AuthenticationError):
    """The peer did not complete the handshake in time."""


class TurnedAwayError(AuthenticationError):
    """The acceptor closed the connection before its greeting: too many handshakes
    were pending there (the connecting side tries again), or it is closing."""


@dataclass(frozen=True)
class ChannelId:
    """One exchange channel of one launch: records of `vertex` from subtask `source`
    to `target`. A channel of another launch is not one the acceptor expects."""

    job: str
    launch: int
    vertex: str
    source: int
    target: int

    def encode(self) -> bytes:
        return json.dumps([self.job, self.launch, self.vertex, self.source, self.target]).encode()

    @staticmethod
    def decode(data: bytes) -> ChannelId:
        job, launch, vertex, source, target = json.loads(data)
        return ChannelId(str(job), int(launch), str(vertex), int(source), int(target))


def read_exactly(sock: socket.socket, size: int, deadline: float) -> bytes | None:
    """`size` bytes, or None if the peer closed the connection first; raises
    HandshakeTimeoutError past `deadline` (time.monotonic())."""
    chunks = bytearray()
    while len(chunks) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeTimeoutError("the handshake did not finish within its deadline")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(size - len(chunks))
        except TimeoutError:
            raise HandshakeTimeoutError("the handshake did not finish within its deadline") from None
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


@dataclass(frozen=True)
class Session:
    """An authenticated connection: its channel, and the MAC keys of each direction."""

    channel: ChannelId
    records_key: bytes  # connecting side -> acceptor: frames of records
    credits_key: bytes  # acceptor -> connecting side: credit grants


def _mac(secret: bytes, role: bytes, nonces: bytes, channel: bytes) -> bytes:
    return hmac.new(secret, role + nonces + channel, hashlib.sha256).digest()


def _session(secret: bytes, nonces: bytes, channel: bytes) -> Session:
    base = _mac(secret, b"K", nonces, channel)
    records, credits = (hmac.new(base, label, hashlib.sha256).digest() for label in (b"records", b"credits"))
    return Session(ChannelId.decode(channel), records, credits)


def accept(sock: socket.socket, secret: bytes, deadline_s: float = HANDSHAKE_DEADLINE_S) -> Session:
    """Acceptor side: challenge the peer, then prove the secret to it; the session
    of the channel it proved it may open."""
    deadline = time.monotonic() + deadline_s
    nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + nonce)
    if (header := read_exactly(sock, 2, deadline)) is None:
        raise AuthenticationError("the peer closed the connection during the handshake")
    (length,) = struct.unpack(">H", header)
    if length > MAX_CHANNEL_ID_BYTES:
        raise AuthenticationError(f"channel id of {length} bytes is longer than {MAX_CHANNEL_ID_BYTES}")
    if (answer := read_exactly(sock, length + NONCE_BYTES + MAC_BYTES, deadline)) is None:
        raise AuthenticationError("the peer closed the connection during the handshake")
    channel, peer_nonce, mac = answer[:length], answer[length:-MAC_BYTES], answer[-MAC_BYTES:]
    nonces = nonce + peer_nonce
    if not hmac.compare_digest(mac, _mac(secret, b"C", nonces, channel)):
        # Each launch has a secret of its own: a task of an earlier launch fails here too.
        raise AuthenticationError("the peer's MAC does not match this launch's secret")
    sock.sendall(_mac(secret, b"A", nonces, channel))
    sock.settimeout(None)
    return _session(secret, nonces, channel)


def connect(
    sock: socket.socket, secret: bytes, channel: ChannelId, deadline_s: float = HANDSHAKE_DEADLINE_S
) -> Session:
    """Connecting side: answer the acceptor's challenge for `channel`, then check its proof."""
    deadline = time.monotonic() + deadline_s
    if (greeting := read_exactly(sock, len(MAGIC) + NONCE_BYTES, deadline)) is None:
        raise TurnedAwayError(f"{_peer(sock)} closed the connection before its handshake")
    if not greeting.startswith(MAGIC):
        raise ConnectionError(f"{_peer(sock)} is not a Lockgate exchange endpoint of this version")
    nonce = os.urandom(NONCE_BYTES)
    nonces = greeting[len(MAGIC) :] + nonce
    encoded = channel.encode()
    sock.sendall(struct.pack(">H", len(encoded)) + encoded + nonce + _mac(secret, b"C", nonces, encoded))
    if (proof := read_exactly(sock, MAC_BYTES, deadline)) is None:
        raise AuthenticationError(
            f"{_peer(sock)} refused channel {channel}: do both sides hold the same job secret?"
        )
    if not hmac.compare_digest(proof, _mac(secret, b"A", nonces, encoded)):
        raise AuthenticationError(f"{_peer(sock)} did not prove it holds the job's secret: not our task")
    sock.settimeout(None)
    return _session(secret, nonces, encoded)


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "the peer"
    return f"{host}:{port}"
