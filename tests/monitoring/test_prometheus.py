"""End to end: a real Prometheus scrapes a running job (driver and tasks on
Spark) and the operator; every query of the dashboard returns data, every
metric the dashboard and alerts read exists, and no alert fires on a healthy job."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import kmock
from kubernetes import client
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.savepoint_client import await_savepoint, request_savepoint
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import NoRestart
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.job_metrics import JobMetrics
from lockgate.runtime.metrics.serving import PortRange, serve
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage

from tests.helm.queries import alert_rules, every_query, metric_names, panels
from tests.monitoring.prometheus import Prometheus
from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.operator.operator_process import OperatorProcess, free_port
from tests.polling import eventually_true
from tests.runtime.engine.test_local_engine import _write_lines

RATE_INTERVAL = "5s"  # Grafana's $__rate_interval at a 1 s scrape interval


def _job(keys, etcd_config, tmp_path: Path, task_ports: PortRange) -> JobSpec:
    return JobSpec(
        entrypoint="tests.jobs.configurable:sums_and_words",
        keys=keys,
        parallelism=2,
        state=StateConfig("rocksdb", tmp_path / "local", 32),
        etcd=etcd_config,
        secret=secrets.token_bytes(32),
        # A generator held to a rate (lag in records) and a log (lag in bytes); runs until stopped.
        args=(("rate", "4000"), ("input", f"file://{tmp_path}/lines"), ("output", f"file://{tmp_path}/out")),
        batch_size=64,
        metrics_ports=task_ports,
    )


async def test_prometheus_scrapes_a_job_and_the_dashboard_has_data(
    spark, cluster: tuple[kmock.KubernetesEmulator, str], etcd, etcd_server, etcd_config, keys, tmp_path: Path
) -> None:
    emulator, api_url = cluster
    _write_lines(tmp_path / "lines", partitions=2, lines=200)
    first = free_port()
    task_ports = PortRange(first, first + 1)
    config = CheckpointConfig(interval_s=0.5, timeout_s=60)
    metrics = JobMetrics(keys, config, parallelism=2)
    driver = serve(metrics.registry, PortRange(0, 0))
    assert driver is not None
    master = JobMaster(
        _job(keys, etcd_config, tmp_path, task_ports),
        BarrierStage(spark),
        CheckpointStorage(f"file://{tmp_path}/checkpoints"),
        config,
        savepoint_dir=f"file://{tmp_path}/savepoints",
        listener=metrics,
    )
    metrics.count_restarts(lambda: master.restarts)
    operator = await OperatorProcess.start(api_url, etcd_server.endpoint, tmp_path)
    ports = [driver.port, task_ports.first, task_ports.last, operator.metrics_port]
    prometheus = Prometheus.start([f"127.0.0.1:{p}" for p in ports], tmp_path)
    run = asyncio.create_task(master.run(NoRestart()))
    try:
        await Kubectl(emulator, client.ApiClient(client.Configuration(host=api_url))).apply("sums", SPEC)

        async def all_targets_up() -> bool:
            assert not run.done(), run
            health = await asyncio.to_thread(prometheus.targets_up)
            return len(health) == len(ports) and set(health.values()) == {"up"}

        await eventually_true(all_targets_up, "Prometheus scrapes driver, both tasks and the operator", 120)

        async def has_data(expr: str) -> bool:
            answer = await asyncio.to_thread(prometheus.query, expr)
            assert answer["status"] == "success", (expr, answer)
            return bool(answer["data"]["result"])

        for name in sorted(metric_names(every_query())):
            await eventually_true(lambda n=name: has_data(n), f"Prometheus has series of {name}", 60)
        for panel in panels(keys.namespace, keys.job, RATE_INTERVAL):

            async def panel_has_data(queries: list[str] = panel.queries) -> bool:
                return any([await has_data(q) for q in queries])

            await eventually_true(panel_has_data, f"panel {panel.title!r} shows data", 60)
        for rule in alert_rules():
            answer = await asyncio.to_thread(prometheus.query, rule["expr"])
            assert answer["status"] == "success", (rule["alert"], answer)
            assert answer["data"]["result"] == [], f"{rule['alert']} fires on a healthy job"

        request = await request_savepoint(etcd, keys, stop=True)
        assert (await await_savepoint(etcd, keys, request, 60)).status == "completed"
        await asyncio.wait_for(run, 60)
    finally:
        if not run.done():
            run.cancel()
        prometheus.stop()
        await operator.stop()
        driver.close()
