"""A task's keyed exchanges over TCP: remote channels to every other subtask,
an in-memory channel to itself."""

from __future__ import annotations

import threading

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.engine.channels import LocalChannel
from lockgate.runtime.engine.handshake import ChannelId
from lockgate.runtime.engine.network import ExchangeServer, RemoteOutputChannel
from lockgate.runtime.engine.task import Wiring


def tcp_wiring(
    graph: JobGraph,
    server: ExchangeServer,
    addresses: list[tuple[str, int]],
    *,
    job: str,
    launch: int,
    index: int,
    secret: bytes,
    capacity: int,
    cancelled: threading.Event,
) -> Wiring:
    """Channels of subtask `index`; `addresses[i]` is task i's exchange server.
    Every channel keeps `server.liveness`. Starts `server`; the caller then
    `connect()`s the wiring."""
    wiring = Wiring.empty(graph)
    remotes: list[RemoteOutputChannel] = []
    for vertex, wakeup in wiring.wakeups.items():
        own = LocalChannel(capacity, wakeup, cancelled)
        inputs, outputs = wiring.inputs[vertex], wiring.outputs[vertex]
        for peer, address in enumerate(addresses):
            if peer == index:
                inputs.append(own)
                outputs.append(own)
                continue
            inputs.append(server.expect(ChannelId(job, launch, vertex, peer, index), capacity, wakeup))
            channel = ChannelId(job, launch, vertex, index, peer)
            remote = RemoteOutputChannel(address, channel, secret, cancelled, server.liveness)
            outputs.append(remote)
            remotes.append(remote)
    server.start()

    def connect() -> None:
        for remote in remotes:
            remote.connect()

    def close() -> None:
        for remote in remotes:
            remote.close()
        server.close()

    wiring.connect = connect
    wiring.closers.append(close)
    return wiring
