"""A job on the test session's Spark, running until stopped, its driver's metrics
served on a free port and each task's on `task_ports`."""

from __future__ import annotations

import asyncio
import random
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.job_master import JobMaster, RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.job_metrics import JobMetrics
from lockgate.runtime.metrics.serving import MetricsServer, PortRange, serve
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage


def free_port_range(size: int) -> PortRange:
    """`size` free ports (the tasks take the first free), below the kernel's ephemeral
    range: a scrape of a port in that range where nothing listens yet can be given
    that very port as its own and connect to itself (TCP simultaneous open), reading
    back its own request as the reply."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        first = random.randrange(10_000, ephemeral - size)
        if all(_free(port) for port in range(first, first + size)):
            return PortRange(first, first + size - 1)
    raise RuntimeError(f"no {size} free ports in a row below {ephemeral}")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class MeteredJob:
    keys: JobKeys
    run: asyncio.Task[RunResult]
    driver: MetricsServer
    task_ports: PortRange

    @classmethod
    def start(
        cls,
        spark: Any,
        etcd_config: EtcdConfig,
        keys: JobKeys,
        work: Path,
        entrypoint: str,
        args: dict[str, str],
        *,
        task_ports: PortRange,
        interval_s: float,
        batch_size: int = 64,
        parallelism: int = 2,
    ) -> MeteredJob:
        spec = JobSpec(
            entrypoint=entrypoint,
            keys=keys,
            parallelism=parallelism,
            state=StateConfig("rocksdb", work / "local", 32),
            control_plane=etcd_config,
            secret=secrets.token_bytes(32),
            args=tuple(args.items()),
            batch_size=batch_size,
            metrics_ports=task_ports,
        )
        config = CheckpointConfig(interval_s=interval_s, timeout_s=60)
        metrics = JobMetrics(keys, config, parallelism=spec.parallelism)
        driver = serve(metrics.registry, PortRange(0, 0), "127.0.0.1")
        assert driver is not None
        storage = CheckpointStorage(f"file://{work}/checkpoints")
        savepoints = f"file://{work}/savepoints"
        master = JobMaster(
            spec, BarrierStage(spark), storage, config, savepoint_dir=savepoints, listener=metrics
        )
        return cls(keys, asyncio.create_task(master.run(restart_strategy("none"))), driver, task_ports)

    def task_port_numbers(self) -> range:
        return range(self.task_ports.first, self.task_ports.last + 1)

    async def stop_with_savepoint(self, etcd: Etcd) -> None:
        request = await request_savepoint(etcd, self.keys, stop=True, expires_in_s=60)
        assert (await await_savepoint(etcd, self.keys, request, 60)).status == "completed"
        await asyncio.wait_for(self.run, 60)

    def close(self) -> None:
        if not self.run.done():
            self.run.cancel()
        self.driver.close()
