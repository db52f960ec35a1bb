"""Coordination alone: trigger-to-completion latency for 64 subtasks with empty state.

Starts an etcd on loopback, a coordinator and 64 participants, each with its
own etcd connection (as each Spark task has). Every participant acknowledges
each trigger at once with an empty state, so what is measured is the etcd
round trips, the watches and the coordinator: trigger write -> 64 acks ->
`_metadata` write -> guarded completion transaction. Reports latency
percentiles and etcd writes (store revisions) per checkpoint.

    .venv/bin/python bench/coordination_latency.py [--subtasks N] [--checkpoints K]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from lockgate.runtime.coordination.coordinator import (
    CheckpointConfig,
    CheckpointCoordinator,
    JobPlan,
)
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.participant import CheckpointParticipant
from lockgate.runtime.snapshot.metadata import SubtaskState
from lockgate.runtime.snapshot.storage import CheckpointStorage


async def participate(participant: CheckpointParticipant, start_revision: int) -> None:
    async for trigger in participant.triggers(start_revision):
        await participant.acknowledge(trigger, SubtaskState(participant.subtask))


async def bench(subtasks: int, checkpoints: int, work: Path) -> None:
    server = EtcdServer(work / "etcd")
    server.start()
    config = EtcdConfig((server.endpoint,))
    keys = JobKeys("bench", "latency")
    clients = [Etcd(config) for _ in range(subtasks + 1)]
    for client in clients:
        await client.connect()
    try:
        driver = clients[0]
        participants = [CheckpointParticipant(c, keys, "v", i) for i, c in enumerate(clients[1:])]
        start = await participants[0].start_revision()
        tasks = [asyncio.create_task(participate(p, start)) for p in participants]
        coordinator = CheckpointCoordinator(
            driver,
            keys,
            CheckpointStorage(f"file://{work}/checkpoints"),
            JobPlan({"v": subtasks}, 128),
            CheckpointConfig(interval_s=None, timeout_s=30, retained=1),
        )
        await coordinator.start()
        latencies, writes = [], []
        for n in range(checkpoints + 3):
            _, before = await driver.get_prefix_at(b"/nothing")
            started = time.perf_counter()
            await coordinator.trigger()
            elapsed = time.perf_counter() - started
            _, after = await driver.get_prefix_at(b"/nothing")
            if n >= 3:  # warm-up: connections, caches
                latencies.append(elapsed * 1000)
                writes.append(after - before)
        await coordinator.close()
        for task in tasks:
            task.cancel()
    finally:
        for client in clients:
            await client.close()
        server.stop()
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    print(f"{subtasks} subtasks, {checkpoints} checkpoints, empty state, etcd on loopback")
    mean = statistics.mean(latencies)
    print(
        f"trigger -> completion: p50 {p(0.5):.1f} ms, p90 {p(0.9):.1f} ms, "
        f"p99 {p(0.99):.1f} ms, max {latencies[-1]:.1f} ms, mean {mean:.1f} ms"
    )
    print(f"etcd writes (store revisions) per checkpoint: {statistics.mean(writes):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subtasks", type=int, default=64)
    parser.add_argument("--checkpoints", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(bench(args.subtasks, args.checkpoints, Path(tempfile.mkdtemp(prefix="bench-coord-"))))


if __name__ == "__main__":
    main()
