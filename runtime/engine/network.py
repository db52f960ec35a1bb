"""Exchange channels over TCP, with credit-based backpressure and liveness.

Every element (a batch of records, a barrier, the end of stream) is one frame:
a 4-byte length and the pickled element. A receiver grants credits, one per
frame it has room for; a sender with no credit left blocks until the receiver
consumed a frame and returned its credit. So at most `capacity` frames wait in
a receiver per channel, and a slow consumer slows its producers.

A barrier of an unaligned checkpoint overtakes: its frame has the length's
top bit set, takes no credit, and carries the sender's partial frame, if any;
the receiver queues that frame (beyond the credit, and returns no credit for it)
and sets the barrier ahead of everything queued, naming what it overtook.

Heartbeats (`liveness.py`) are a frame of length 0 towards the receiver and a
grant of 0 credits towards the sender; each side discards them. A channel
whose peer was silent for the liveness timeout fails with `ChannelSilentError`.

Every frame, grant and heartbeat carries a MAC (`frame_seal.py`) with the keys
the handshake derived; one that does not check out fails the channel before its
payload is deserialized.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import pickle
import socket
import struct
import threading
import time

from lockgate.runtime.api.connectors import EXCHANGE_FRAME_LIMIT_BYTES
from lockgate.runtime.engine.channels import ChannelClosedError, ChannelSilentError, TaskCancelledError
from lockgate.runtime.engine.events import Barrier, Element, EndOfStream, OvertakingBarrier, Received
from lockgate.runtime.engine.frame_seal import MAC_BYTES, FrameAuthenticationError, Opener, Sealer
from lockgate.runtime.engine.handshake import (
    HANDSHAKE_DEADLINE_S,
    AuthenticationError,
    ChannelId,
    Session,
    TurnedAwayError,
    accept,
    connect,
)
from lockgate.runtime.engine.liveness import Link, Liveness

__all__ = [
    "ChannelClosedError",
    "ChannelSilentError",
    "ExchangeServer",
    "RemoteInputChannel",
    "RemoteOutputChannel",
]

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
MAX_FRAME_BYTES = EXCHANGE_FRAME_LIMIT_BYTES
WAIT_S = 0.05
HEARTBEAT = _U32.pack(0)
"""A frame of length 0 (data direction) or a grant of 0 credits (credit direction)."""
ONE_CREDIT = _U32.pack(1)
OVERTAKING = 1 << 31
"""Set in a frame's length: the frame is an overtaking barrier (and the partial frame it carries)."""
# A task's peers open one connection per channel, all at once at start: P tasks on a
# host with C channels each; what a host holds beyond that is turned away at once.
MAX_PENDING_HANDSHAKES = 256
MAX_PENDING_HANDSHAKES_PER_HOST = 64


class RemoteInputChannel:
    """The receiving end of one channel; `ExchangeServer` attaches its socket."""

    def __init__(
        self, channel: ChannelId, capacity: int, wakeup: threading.Event, liveness: Liveness
    ) -> None:
        self.channel = channel
        self.capacity = capacity
        self._wakeup = wakeup
        self._liveness = liveness
        # Payloads, each with whether it took a credit; b"" marks where the connection ended.
        self._frames: collections.deque[tuple[bytes, bool]] = collections.deque()
        self._credited = 0  # queued frames that took a credit
        self._overtaking: collections.deque[tuple[Barrier, int]] = collections.deque()
        self._appended = 0  # frames ever queued: the next one's sequence number
        self._taken = 0  # frames ever polled
        self._queue_lock = threading.Lock()
        self._link: Link | None = None
        self._opener: Opener | None = None
        self._ended = False
        self._error: Exception | None = None
        self._silence: str | None = None
        self.attached = threading.Event()

    def attach(self, sock: socket.socket, peer: tuple[str, int], session: Session) -> None:
        if self.attached.is_set():
            raise ConnectionError(f"channel {self.channel} is already connected")
        name = f"channel {self.channel} from {peer[0]}:{peer[1]}"
        self._opener = Opener(session.records_key, name)
        self._link = Link(sock, self._liveness, name, HEARTBEAT, Sealer(session.credits_key))
        self._link.send(_U32.pack(self.capacity))
        self.attached.set()
        threading.Thread(target=self._read, name=f"recv-{self.channel.vertex}", daemon=True).start()

    def _read(self) -> None:
        assert self._link is not None
        assert self._opener is not None
        try:
            while (header := self._link.read_exactly(_U32.size)) is not None:
                (length,) = _U32.unpack(header)
                overtaking, length = bool(length & OVERTAKING), length & ~OVERTAKING
                if length > MAX_FRAME_BYTES:
                    raise ChannelClosedError(f"frame of {length} bytes on {self.channel}")
                if (sealed := self._link.read_exactly(length + MAC_BYTES)) is None:
                    break
                payload, mac = sealed[:length], sealed[length:]
                self._opener.check(mac, header, payload)
                if overtaking:
                    self._queue_overtaking(payload)
                elif length:  # else a heartbeat
                    self._queue(payload)
                self._wakeup.set()
        except ChannelSilentError as silent:
            self._silence = str(silent)
        except OSError as error:  # FrameAuthenticationError too: nothing after it is read
            self._error = error
        self._link.ended()
        with self._queue_lock:
            self._frames.append((b"", False))
        self._wakeup.set()

    def _queue(self, payload: bytes) -> None:
        with self._queue_lock:
            if self._credited >= self.capacity:
                raise ChannelClosedError(f"{self.channel} sent beyond its credit")
            self._frames.append((payload, True))
            self._credited += 1
            self._appended += 1

    def _queue_overtaking(self, payload: bytes) -> None:
        try:
            barrier, carried = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - whatever it holds, it is no barrier: the channel fails
            barrier = carried = None
        if not isinstance(barrier, Barrier) or not isinstance(carried, (bytes, type(None))):
            raise ChannelClosedError(f"{self.channel} sent an overtaking frame that holds no barrier")
        with self._queue_lock:
            if carried is not None:
                self._frames.append((carried, False))
                self._appended += 1
            self._overtaking.append((barrier, self._appended))

    def poll(self) -> Received | None:
        if self._silence is not None and not self._ended:
            # What is still queued cannot help: the task fails and restarts anyway.
            raise ChannelSilentError(self._silence)
        with self._queue_lock:
            if self._overtaking:
                barrier, position = self._overtaking.popleft()
                ahead = itertools.islice(self._frames, position - self._taken)
                return OvertakingBarrier(barrier, tuple(payload for payload, _ in ahead))
            if not self._frames:
                return None
            payload, credited = self._frames.popleft()
            if payload:
                self._taken += 1
                self._credited -= credited
        if not payload:
            if self._ended:
                return None
            cause = f": {self._error}" if self._error else ""
            raise ChannelClosedError(f"{self.channel} closed before the end of its stream{cause}")
        element: Element = pickle.loads(payload)
        assert self._link is not None
        if credited:
            # The sender may be gone; what it sent is still read to its end.
            with contextlib.suppress(OSError):
                self._link.send(ONE_CREDIT)
        if isinstance(element, EndOfStream):
            self._ended = True
        return element

    def close(self) -> None:
        if self._link is not None:
            self._link.close()


class RemoteOutputChannel:
    """The sending end of one channel."""

    def __init__(
        self,
        address: tuple[str, int],
        channel: ChannelId,
        secret: bytes,
        cancelled: threading.Event,
        liveness: Liveness | None = None,
    ) -> None:
        self.address = address
        self.channel = channel
        self._secret = secret
        self._cancelled = cancelled
        self._liveness = liveness or Liveness()
        self._link: Link | None = None
        self._opener: Opener | None = None
        self._credits = 0
        self.capacity = 1  # the receiver's first grant, once connected
        self._failure: ChannelClosedError | None = None
        self._condition = threading.Condition()
        self.blocked_s = 0.0

    def connect(self, timeout_s: float = 30.0) -> None:
        """Connect and authenticate; retries until `timeout_s` while the acceptor is
        not listening yet or turns the connection away unheard (it admits a bounded
        number of handshakes at a time)."""
        host, port = self.address
        deadline = time.monotonic() + timeout_s
        while True:
            sock = None
            try:
                sock = socket.create_connection(self.address, timeout=timeout_s)
                session = connect(sock, self._secret, self.channel, min(HANDSHAKE_DEADLINE_S, timeout_s))
                break
            except BaseException as error:
                if sock is not None:
                    sock.close()
                if not isinstance(error, (ConnectionRefusedError, ConnectionResetError, TurnedAwayError)):
                    raise
                if self._cancelled.is_set():  # the peer failed before it listened: no use waiting
                    raise TaskCancelledError from error
                if time.monotonic() > deadline:
                    raise AuthenticationError(f"{host}:{port}: {error}") from error
            time.sleep(WAIT_S)
        name = f"channel {self.channel} to {host}:{port}"
        self._opener = Opener(session.credits_key, name)
        self._link = Link(sock, self._liveness, name, HEARTBEAT, Sealer(session.records_key))
        if (grant := self._read_grant()) is None:
            self._link.close()
            raise AuthenticationError(f"{host}:{port} closed channel {self.channel} before granting credit")
        self._credits = self.capacity = grant
        threading.Thread(target=self._read_credits, name=f"credit-{self.channel.vertex}", daemon=True).start()

    def _read_grant(self) -> int | None:
        """The next grant of credits (0: a heartbeat), its MAC checked; None at the end."""
        assert self._link is not None
        assert self._opener is not None
        if (sealed := self._link.read_exactly(_U32.size + MAC_BYTES)) is None:
            return None
        grant, mac = sealed[: _U32.size], sealed[_U32.size :]
        self._opener.check(mac, grant)
        credits: int = _U32.unpack(grant)[0]
        return credits

    def _read_credits(self) -> None:
        assert self._link is not None
        failure = ChannelClosedError(f"{self.channel}: the receiver closed the connection")
        try:
            while (credits := self._read_grant()) is not None:
                if credits:  # else a heartbeat
                    with self._condition:
                        self._credits += credits
                        self._condition.notify()
        except ChannelSilentError as silent:
            failure = silent
        except FrameAuthenticationError as forged:
            failure = ChannelClosedError(str(forged))
        except OSError as error:
            failure = ChannelClosedError(f"{self.channel}: {error}")
        self._link.ended()
        with self._condition:
            self._failure = failure
            self._condition.notify()

    def send(self, element: Element) -> None:
        assert self._link is not None, "connect() first"
        payload = pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
        with self._condition:
            if self._failure is not None:
                raise self._failure
            if self._credits == 0:
                self._wait_for_credit()
            self._credits -= 1
        self._link.send(_U32.pack(len(payload)) + payload)

    def send_overtaking(self, barrier: Barrier, carried: Element | None) -> None:
        assert self._link is not None, "connect() first"
        frame = None if carried is None else pickle.dumps(carried, protocol=pickle.HIGHEST_PROTOCOL)
        payload = pickle.dumps((barrier, frame), protocol=pickle.HIGHEST_PROTOCOL)
        with self._condition:
            if self._failure is not None:
                raise self._failure
        self._link.send(_U32.pack(len(payload) | OVERTAKING) + payload)

    def _wait_for_credit(self) -> None:
        """Blocked by backpressure: the receiver has every frame it granted room for."""
        started = time.monotonic()
        try:
            while self._credits == 0:
                if self._cancelled.is_set():
                    raise TaskCancelledError
                if self._failure is not None:
                    raise self._failure
                self._condition.wait(WAIT_S)
        finally:
            self.blocked_s += time.monotonic() - started

    def close(self) -> None:
        if self._link is not None:
            self._link.close()


class ExchangeServer:
    """Accepts a task's incoming channels; refuses (and logs) peers without the secret."""

    def __init__(
        self,
        secret: bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        liveness: Liveness | None = None,
        handshake_deadline_s: float = HANDSHAKE_DEADLINE_S,
    ) -> None:
        self._secret = secret
        self._handshake_deadline_s = handshake_deadline_s
        self._pending: dict[str, int] = {}  # handshakes under way, by the peer's host
        self._pending_lock = threading.Lock()
        self.turned_away = 0
        """Connections closed unheard: too many handshakes were pending."""
        self.liveness = liveness or Liveness()
        """Of every channel of the task, incoming and outgoing."""
        self._listener = socket.create_server((host, port), backlog=128)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._inputs: dict[ChannelId, RemoteInputChannel] = {}
        self.refused = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="exchange-accept", daemon=True)

    def expect(self, channel: ChannelId, capacity: int, wakeup: threading.Event) -> RemoteInputChannel:
        """The input that the connection for `channel` will feed."""
        remote = RemoteInputChannel(channel, capacity, wakeup, self.liveness)
        self._inputs[channel] = remote
        return remote

    def start(self) -> None:
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return
            self._admit(sock, peer)

    def _admit(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        """Handshake on a thread of its own, if a place is free: of all handshakes and
        of those from `peer`'s host (a task opens one connection per channel at once)."""
        with self._pending_lock:
            from_host = self._pending.get(peer[0], 0)
            admitted = sum(self._pending.values()) < MAX_PENDING_HANDSHAKES
            if admitted and from_host < MAX_PENDING_HANDSHAKES_PER_HOST:
                self._pending[peer[0]] = from_host + 1
            else:
                self.turned_away += 1
                sock.close()  # the connecting side tries again: the places free within a deadline
                return
        try:
            threading.Thread(target=self._handshake, args=(sock, peer), daemon=True).start()
        except BaseException:
            self._handshake_done(peer)
            raise

    def _handshake(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        try:
            session = accept(sock, self._secret, self._handshake_deadline_s)
            if (remote := self._inputs.get(session.channel)) is None:
                raise AuthenticationError(f"no such channel here: {session.channel}")
            remote.attach(sock, peer, session)
        except (OSError, ValueError) as error:
            self.refused += 1
            log.warning("refused exchange connection from %s:%s: %s", peer[0], peer[1], error)
            sock.close()
        finally:
            self._handshake_done(peer)

    def _handshake_done(self, peer: tuple[str, int]) -> None:
        with self._pending_lock:
            left = self._pending.pop(peer[0]) - 1
            if left:
                self._pending[peer[0]] = left

    def close(self) -> None:
        self._closed = True
        # close() alone does not wake a thread blocked in accept(): the kernel would
        # keep the socket listening, and the thread waiting, for as long as the process.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        for remote in self._inputs.values():
            remote.close()
