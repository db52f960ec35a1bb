"""Authenticating every message of an exchange connection after the handshake.

Frames are pickles: whoever could slip one into a connection could run code in
the receiving task. So each message on the wire carries an HMAC-SHA256 of its
bytes and of its place in the connection (a sequence number per direction), with
a key of that connection and direction that the handshake derived from the
job's secret and both sides' nonces. A message injected, altered, replayed,
reordered or carried over from another connection fails the check, and the
receiver fails the channel before it deserializes anything.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

MAC_BYTES = hashlib.sha256().digest_size
_SEQUENCE = struct.Struct(">Q")


class FrameAuthenticationError(ConnectionError):
    """A message on an exchange connection does not carry its sender's MAC."""


class Sealer:
    """The sending side of one direction: each message gets its MAC, in order.
    Not thread-safe: the caller serializes sends (so the sequence matches the wire)."""

    def __init__(self, key: bytes) -> None:
        self._mac = hmac.new(key, digestmod=hashlib.sha256)
        self._sequence = 0

    def seal(self, message: bytes) -> bytes:
        mac = self._mac.copy()  # the keyed state, without hashing the key again per message
        mac.update(_SEQUENCE.pack(self._sequence))
        mac.update(message)
        self._sequence += 1
        return message + mac.digest()


class Opener:
    """The receiving side of one direction: checks each message's MAC, in order."""

    def __init__(self, key: bytes, name: str) -> None:
        self._mac = hmac.new(key, digestmod=hashlib.sha256)
        self._sequence = 0
        self._name = name

    def check(self, mac: bytes, *parts: bytes) -> None:
        """Raises FrameAuthenticationError unless `mac` is the sender's for `parts` here."""
        expected = self._mac.copy()
        expected.update(_SEQUENCE.pack(self._sequence))
        for part in parts:
            expected.update(part)
        if not hmac.compare_digest(mac, expected.digest()):
            raise FrameAuthenticationError(
                f"{self._name}: message {self._sequence} does not carry the sender's MAC: it was "
                "altered, injected or replayed on the way; nothing of it was read"
            )
        self._sequence += 1
