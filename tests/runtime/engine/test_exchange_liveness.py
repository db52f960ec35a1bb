"""A silent peer fails an exchange channel within its liveness timeout; an idle one never.

The channels go through a real TCP proxy that can blackhole them: both
connections stay open, nothing more is forwarded either way — a partition as
both ends see it (no reset, no close).
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.cancellation import cancel_and_wait
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.handshake import ChannelId
from lockgate.runtime.engine.liveness import Liveness, configure_socket
from lockgate.runtime.engine.network import (
    ChannelClosedError,
    ExchangeServer,
    RemoteInputChannel,
    RemoteOutputChannel,
)
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.task import Task, TaskConfig
from lockgate.runtime.engine.tcp_wiring import tcp_wiring
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.faults.tcp_proxy import TcpProxy
from tests.polling import eventually

SECRET = b"s" * 32
CHANNEL = ChannelId("job", 1, "count", 0, 1)
LIVENESS = Liveness(timeout_s=1.0, heartbeat_s=0.1)
MARGIN_S = 5.0
"""Beyond the timeout: the tick that notices, and a loaded 2-core machine's scheduling."""

POLL_WAIT_S = 0.005  # as a chain waits on its wakeup


@pytest.fixture
def server() -> Iterator[ExchangeServer]:
    server = ExchangeServer(SECRET, liveness=LIVENESS)
    yield server
    server.close()


class Endpoints:
    """One channel whose connection goes through `proxy`."""

    def __init__(self, server: ExchangeServer, proxy: TcpProxy, capacity: int) -> None:
        self.wakeup = threading.Event()
        self.inbound: RemoteInputChannel = server.expect(CHANNEL, capacity, self.wakeup)
        server.start()
        self.outbound = RemoteOutputChannel(proxy.address, CHANNEL, SECRET, threading.Event(), LIVENESS)
        self.outbound.connect()

    def poll_until(self, deadline: float) -> None:
        """Poll as a chain does until `deadline`, dropping what arrives."""
        while time.monotonic() < deadline:
            self.inbound.poll()
            self.wakeup.wait(POLL_WAIT_S)
            self.wakeup.clear()

    def poll(self, within_s: float = 10.0) -> object:
        """The next element, as a chain polls for it."""
        deadline = time.monotonic() + within_s
        while (element := self.inbound.poll()) is None:
            assert time.monotonic() < deadline, f"nothing arrived within {within_s} s"
            self.wakeup.wait(POLL_WAIT_S)
            self.wakeup.clear()
        return element


class SendUntilFailure:
    """A producer sending batches as fast as credit allows, in its own thread."""

    def __init__(self, channel: RemoteOutputChannel, batch: list[object] | None = None) -> None:
        self.failure: BaseException | None = None
        self.failed_at = 0.0
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(channel, batch), daemon=True).start()

    def _run(self, channel: RemoteOutputChannel, batch: list[object] | None) -> None:
        try:
            for n in itertools.count():
                channel.send(batch or [n])
        except BaseException as error:  # noqa: BLE001 - what the test inspects
            self.failure = error
            self.failed_at = time.monotonic()
        finally:
            self.done.set()


def _silence_s(message: str) -> float:
    found = re.search(r"nothing heard for (\d+\.\d) s", message)
    assert found, f"the error does not say how long the peer was silent: {message}"
    return float(found[1])


def test_a_partition_fails_the_polling_receiver_and_the_sender_blocked_on_credit(server) -> None:
    with TcpProxy(server.address) as proxy:
        ends = Endpoints(server, proxy, capacity=2)
        ends.outbound.send([0])
        assert ends.poll() == [0]
        proxy.blackhole()
        cut = time.monotonic()
        sender = SendUntilFailure(ends.outbound)  # runs out of credit, then waits for more

        deadline = cut + LIVENESS.timeout_s + MARGIN_S
        with pytest.raises(ChannelClosedError) as receiving:
            ends.poll_until(deadline)  # may still deliver what crossed before the cut
        received_failure_after = time.monotonic() - cut
        assert sender.done.wait(max(0.0, deadline - time.monotonic())), (
            f"the sender blocked on credit is still blocked {time.monotonic() - cut:.1f} s after the cut"
        )

    message = str(receiving.value)
    assert str(CHANNEL) in message
    assert re.search(r"from 127\.0\.0\.1:\d+", message), message
    assert _silence_s(message) >= LIVENESS.timeout_s
    assert received_failure_after >= LIVENESS.timeout_s / 2, "failed long before the timeout"

    assert isinstance(sender.failure, ChannelClosedError), repr(sender.failure)
    message = str(sender.failure)
    assert str(CHANNEL) in message
    assert f"to 127.0.0.1:{proxy.address[1]}" in message
    assert _silence_s(message) >= LIVENESS.timeout_s
    assert sender.failed_at - cut >= LIVENESS.timeout_s / 2, "failed long before the timeout"


def test_a_sender_stuck_on_a_full_socket_fails_within_the_timeout(server) -> None:
    with TcpProxy(server.address) as proxy:
        ends = Endpoints(server, proxy, capacity=2)
        proxy.blackhole()
        cut = time.monotonic()
        # More than every buffer on the way holds: the send blocks in the socket.
        sender = SendUntilFailure(ends.outbound, [b"x" * (64 << 20)])
        assert sender.done.wait(LIVENESS.timeout_s + MARGIN_S), (
            f"the sender is still stuck {time.monotonic() - cut:.1f} s after the cut"
        )
    assert isinstance(sender.failure, ChannelClosedError), repr(sender.failure)
    assert f"to 127.0.0.1:{proxy.address[1]}: nothing heard for" in str(sender.failure)


def test_an_idle_channel_lives_through_many_timeouts_on_heartbeats(server) -> None:
    with TcpProxy(server.address) as proxy:
        ends = Endpoints(server, proxy, capacity=2)
        sent, granted = proxy.forwarded("to_target"), proxy.forwarded("from_target")
        idle_until = time.monotonic() + 4 * LIVENESS.timeout_s
        while time.monotonic() < idle_until:  # no record, for four timeouts
            assert ends.inbound.poll() is None
            ends.wakeup.wait(POLL_WAIT_S)
            ends.wakeup.clear()
        # Heartbeats crossed both ways, and the channel still carries records.
        assert proxy.forwarded("to_target") > sent
        assert proxy.forwarded("from_target") > granted
        ends.outbound.send(["after the idle time"])
        assert ends.poll() == ["after the idle time"]


def test_a_sender_blocked_on_credit_for_many_timeouts_stays_up(server) -> None:
    """As when the receiver holds the channel for barrier alignment, or is slow."""
    with TcpProxy(server.address) as proxy:
        ends = Endpoints(server, proxy, capacity=1)
        ends.outbound.send([0])  # the only credit
        second_sent = threading.Event()
        failures: list[BaseException] = []

        def send_second() -> None:
            try:
                ends.outbound.send([1])
                second_sent.set()
            except BaseException as error:  # noqa: BLE001 - what the test inspects
                failures.append(error)

        threading.Thread(target=send_second, daemon=True).start()
        # Four timeouts with no credit and nothing consumed: the receiver's heartbeats
        # must keep the sender waiting, not failing.
        assert not second_sent.wait(4 * LIVENESS.timeout_s), "a frame went out without credit"
        assert failures == []
        assert ends.poll() == [0]
        assert second_sent.wait(10), "the returned credit released the sender"
        assert ends.poll() == [1]


def test_exchange_sockets_keep_tcp_keepalive_as_a_second_line() -> None:
    liveness = Liveness.from_timeout(10.0)
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()) as sock,
    ):
        configure_socket(sock, liveness)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 4
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 20_000
        assert sock.getblocking()


@pytest.mark.parametrize(
    ("timeout_s", "heartbeat_s"), [(0.0, 0.0), (-1.0, 0.1), (float("nan"), 0.1), (1.0, 0.6), (7200.0, 1.0)]
)
def test_a_liveness_that_cannot_work_is_refused(timeout_s: float, heartbeat_s: float) -> None:
    with pytest.raises(ValueError, match=r"liveness timeout|heartbeats every"):
        Liveness(timeout_s, heartbeat_s)


class TaskThread:
    """A task running in its own thread, as on its own executor: its own cancel event."""

    def __init__(self, task: Task) -> None:
        self.failure: BaseException | None = None
        self.ended_at = 0.0
        self.ended = threading.Event()
        name = f"task-{task.config.index}"
        threading.Thread(target=self._run, args=(task,), name=name, daemon=True).start()

    def _run(self, task: Task) -> None:
        try:
            task.run()
        except BaseException as error:  # noqa: BLE001 - what the test inspects
            self.failure = error
        finally:
            self.ended_at = time.monotonic()
            self.ended.set()


async def test_a_partition_between_two_tasks_fails_each_task_within_seconds(
    etcd_config, keys, tmp_path: Path
) -> None:
    args = {"count": "unbounded", "rate": "1000", "output": f"file://{tmp_path}/out"}
    graph = build_graph("tests.jobs.configurable:running_sum", keys.job, args)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.5, timeout_s=60)
    async with Etcd(etcd_config) as etcd:
        coordinator = CheckpointCoordinator(etcd, keys, storage, job_plan(graph, 2, 32), config)
        await coordinator.start()
        coordination = asyncio.create_task(coordinator.run())
        try:
            await _partition_two_tasks(etcd_config, keys, tmp_path, graph, coordinator)
        finally:
            await cancel_and_wait([coordination], "stopping the coordinator")
            await coordinator.close()


async def _partition_two_tasks(
    etcd_config: EtcdConfig,
    keys: JobKeys,
    tmp_path: Path,
    graph: JobGraph,
    coordinator: CheckpointCoordinator,
) -> None:
    servers = [ExchangeServer(SECRET, liveness=LIVENESS) for _ in range(2)]
    proxies = [TcpProxy(server.address) for server in servers]
    # Each task reaches the other only through the other's proxy.
    addresses = [[servers[0].address, proxies[1].address], [proxies[0].address, servers[1].address]]
    state = StateConfig("heap", tmp_path / "local", 32)
    controls = [CheckpointControl(etcd_config, keys, i, coordinator.launch) for i in range(2)]
    tasks = []
    for i in range(2):
        cancelled = threading.Event()
        wiring = tcp_wiring(
            graph,
            servers[i],
            addresses[i],
            job=keys.job,
            launch=coordinator.launch,
            index=i,
            secret=SECRET,
            capacity=4,
            cancelled=cancelled,
        )
        config = TaskConfig(i, 2, state, batch_size=16)
        tasks.append(Task(graph, config, controls[i], wiring=wiring, cancelled=cancelled))
    for control in controls:
        control.start(coordinator.trigger_revision)
    runs = [TaskThread(task) for task in tasks]
    try:
        await eventually(
            lambda: all(p.forwarded("to_target") > 10_000 for p in proxies), "records cross both ways"
        )
        for proxy in proxies:
            proxy.blackhole()
        cut = time.monotonic()
        for index, run in enumerate(runs):
            remaining = cut + LIVENESS.timeout_s + MARGIN_S - time.monotonic()
            assert run.ended.wait(max(0.0, remaining)), (
                f"task {index} still runs {time.monotonic() - cut:.1f} s after the cut"
            )
            assert isinstance(run.failure, ChannelClosedError), repr(run.failure)
            assert "nothing heard for" in str(run.failure)
    finally:
        for proxy in proxies:
            proxy.close()  # releases a task that did not notice, so the test ends
        for task in tasks:
            task.cancelled.set()
        for run in runs:
            run.ended.wait(30)
        for control in controls:
            control.close()


def _send_when_told(address: tuple[str, int], send_now: Any) -> None:
    """In a forked child: connect, stay idle until told, then send one batch."""
    channel = ChannelId("job", 1, "count", 1, 0)
    outbound = RemoteOutputChannel(address, channel, SECRET, threading.Event(), LIVENESS)
    outbound.connect()
    assert send_now.wait(30)
    outbound.send(["alive"])
    outbound.close()


def test_a_forked_worker_keeps_its_own_channels_alive(server) -> None:
    """Spark forks Python workers: a child has none of its parent's threads, so it
    must start its own ticker, or its peers hear no heartbeat from it."""
    other = ExchangeServer(SECRET, liveness=LIVENESS)
    try:
        with TcpProxy(other.address) as proxy:
            Endpoints(other, proxy, capacity=2)  # so the parent's ticker runs at the fork
            wakeup = threading.Event()
            inbound = server.expect(ChannelId("job", 1, "count", 1, 0), 2, wakeup)
            server.start()
            fork = multiprocessing.get_context("fork")
            send_now = fork.Event()
            child = fork.Process(target=_send_when_told, args=(server.address, send_now))
            child.start()
            # Three timeouts with nothing but the child's heartbeats.
            idle_until = time.monotonic() + 3 * LIVENESS.timeout_s
            while time.monotonic() < idle_until:
                assert inbound.poll() is None
                wakeup.wait(POLL_WAIT_S)
                wakeup.clear()
            send_now.set()
            deadline = time.monotonic() + 10
            while (element := inbound.poll()) is None:
                assert time.monotonic() < deadline, "the child's batch did not arrive"
                wakeup.wait(POLL_WAIT_S)
                wakeup.clear()
            assert element == ["alive"]
            child.join(timeout=30)
            assert child.exitcode == 0
    finally:
        other.close()
