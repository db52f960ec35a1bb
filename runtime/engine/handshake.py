"""Authenticating an exchange connection with the job's secret, before any payload.

The accepting side sends a fresh random nonce; the connecting side answers with
the channel it wants and HMAC-SHA256(secret, nonce + channel). Only after the
MAC checks out does the acceptor read anything else from the socket: a peer
without the secret never gets a byte of its data deserialized.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
from dataclasses import dataclass

MAGIC = b"LGX1"
NONCE_BYTES = 32
MAC_BYTES = hashlib.sha256().digest_size
MAX_CHANNEL_ID_BYTES = 1024
HANDSHAKE_TIMEOUT_S = 10.0


class AuthenticationError(ConnectionError):
    """The peer did not prove it holds the job's secret."""


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


def read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None if the peer closed the connection first."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _mac(secret: bytes, nonce: bytes, channel: bytes) -> bytes:
    return hmac.new(secret, nonce + channel, hashlib.sha256).digest()


def accept(sock: socket.socket, secret: bytes) -> ChannelId:
    """Acceptor side: challenge the peer; the channel it proved it may open."""
    nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + nonce)
    header = read_exactly(sock, 2)
    if header is None:
        raise AuthenticationError("the peer closed the connection during the handshake")
    (length,) = struct.unpack(">H", header)
    if length > MAX_CHANNEL_ID_BYTES:
        raise AuthenticationError(f"channel id of {length} bytes is longer than {MAX_CHANNEL_ID_BYTES}")
    answer = read_exactly(sock, length + MAC_BYTES)
    if answer is None:
        raise AuthenticationError("the peer closed the connection during the handshake")
    channel, mac = answer[:length], answer[length:]
    if not hmac.compare_digest(mac, _mac(secret, nonce, channel)):
        # Each launch has a secret of its own: a task of an earlier launch fails here too.
        raise AuthenticationError("the peer's MAC does not match this launch's secret")
    return ChannelId.decode(channel)


def connect(sock: socket.socket, secret: bytes, channel: ChannelId) -> None:
    """Connecting side: answer the acceptor's challenge for `channel`."""
    greeting = read_exactly(sock, len(MAGIC) + NONCE_BYTES)
    if greeting is None or not greeting.startswith(MAGIC):
        raise ConnectionError(f"{sock.getpeername()} is not a Lockgate exchange endpoint")
    nonce = greeting[len(MAGIC) :]
    encoded = channel.encode()
    sock.sendall(struct.pack(">H", len(encoded)) + encoded + _mac(secret, nonce, encoded))
