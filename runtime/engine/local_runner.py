"""Runs all P tasks of a job as threads of this process, wired by local channels.

The Spark runner is the product; this one exercises the same `Task` code in
unit tests and small local runs without starting Spark.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Callable
from typing import Literal

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.engine.channels import DEFAULT_CHANNEL_CAPACITY, JobCancelledError, LocalChannel
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.liveness import Liveness
from lockgate.runtime.engine.network import ExchangeServer
from lockgate.runtime.engine.task import Task, TaskConfig, Wiring
from lockgate.runtime.engine.tcp_wiring import tcp_wiring


def local_wiring(
    graph: JobGraph, parallelism: int, capacity: int, cancelled: threading.Event
) -> list[Wiring]:
    wiring = [Wiring.empty(graph) for _ in range(parallelism)]
    for source, target in itertools.product(wiring, repeat=2):
        for vertex, wakeup in target.wakeups.items():
            channel = LocalChannel(capacity, wakeup, cancelled)
            source.outputs[vertex].append(channel)
            target.inputs[vertex].append(channel)
    return wiring


def run_local(
    graph: JobGraph,
    configs: list[TaskConfig],
    control: Callable[[int], CheckpointControl],
    restore: RestorePoint | None = None,
    *,
    channel_capacity: int = DEFAULT_CHANNEL_CAPACITY,
    trigger_revision: int | None = None,
    cancelled: threading.Event | None = None,
    exchange: Literal["memory", "tcp"] = "memory",
    liveness: Liveness | None = None,
    task_graph: Callable[[int], JobGraph] | None = None,
) -> list[Task]:
    """Run the job to its end and return its tasks (for their counters); re-raises
    the first task failure. `trigger_revision`: the coordinator's, so tasks see
    every trigger it published. Setting `cancelled`
    tears the job down: the run then ends with `JobCancelledError`. `exchange="tcp"`
    connects the tasks through authenticated TCP channels, as on Spark, which
    fail on `liveness` (default: `Liveness()`). `task_graph`: each task's own
    graph (built for it, as a Spark task builds its own), else `graph` shared."""
    cancelled = cancelled or threading.Event()
    controls = [control(config.index) for config in configs]
    if exchange == "tcp":
        secret = secrets.token_bytes(32)
        servers = [ExchangeServer(secret, liveness=liveness or Liveness()) for _ in configs]
        addresses = [server.address for server in servers]
        wiring = [
            tcp_wiring(
                graph,
                server,
                addresses,
                job=graph.name,
                launch=controls[0].launch,
                index=index,
                secret=secret,
                capacity=channel_capacity,
                cancelled=cancelled,
            )
            for index, server in enumerate(servers)
        ]
    else:
        wiring = local_wiring(graph, len(configs), channel_capacity, cancelled)
    try:
        tasks = [
            Task(
                graph if task_graph is None else task_graph(c.index),
                c,
                controls[c.index],
                wiring=wiring[c.index],
                restore=restore,
                cancelled=cancelled,
            )
            for c in configs
        ]
    except BaseException:
        # A task that cannot start (its restore failed): nothing runs, so nothing
        # else would close the etcd connections and exchange sockets.
        for each in controls:
            each.close()
        for close in (close for each in wiring for close in each.closers):
            close()
        raise
    for each in controls:
        each.start(trigger_revision)
    failures: list[BaseException] = []

    def run(task: Task) -> None:
        try:
            task.run()
        except BaseException as error:  # noqa: BLE001 - re-raised after every task stopped
            failures.append(error)

    threads = [threading.Thread(target=run, args=(t,), name=f"task-{t.config.index}") for t in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for each in controls:
        each.close()
    if failures:
        raise failures[0]
    if cancelled.is_set():
        raise JobCancelledError("the job was cancelled before it finished")
    return tasks
