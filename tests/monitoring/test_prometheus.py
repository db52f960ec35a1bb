"""End to end: a real Prometheus scrapes a running job (driver and tasks on
Spark) and the operator; every query of the dashboard returns data, every
metric the dashboard and alerts read exists, and no alert fires on a healthy job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kmock
from kubernetes import client
from lockgate.runtime.metrics.serving import PortRange

from tests.helm.queries import alert_rules, every_query, metric_names, panels
from tests.monitoring.prometheus import Prometheus
from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.operator.operator_process import OperatorProcess, free_port
from tests.polling import eventually_true
from tests.runtime.engine.test_local_engine import _write_lines
from tests.runtime.metrics.metered_job import MeteredJob

RATE_INTERVAL = "5s"  # Grafana's $__rate_interval at a 1 s scrape interval


async def test_prometheus_scrapes_a_job_and_the_dashboard_has_data(
    spark, cluster: tuple[kmock.KubernetesEmulator, str], etcd, etcd_server, etcd_config, keys, tmp_path: Path
) -> None:
    emulator, api_url = cluster
    _write_lines(tmp_path / "lines", partitions=2, lines=200)
    first = free_port()
    task_ports = PortRange(first, first + 1)
    job = MeteredJob.start(
        spark,
        etcd_config,
        keys,
        tmp_path,
        # A generator held to a rate (lag in records) and a log (lag in bytes); runs until stopped.
        "tests.jobs.configurable:sums_and_words",
        {"rate": "4000", "input": f"file://{tmp_path}/lines", "output": f"file://{tmp_path}/out"},
        task_ports=task_ports,
        interval_s=0.5,
    )
    operator = await OperatorProcess.start(api_url, etcd_server.endpoint, tmp_path)
    ports = [job.driver.port, *job.task_port_numbers(), operator.metrics_port]
    prometheus = Prometheus.start([f"127.0.0.1:{p}" for p in ports], tmp_path)
    try:
        await Kubectl(emulator, client.ApiClient(client.Configuration(host=api_url))).apply("sums", SPEC)

        async def all_targets_up() -> bool:
            assert not job.run.done(), job.run
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

        await job.stop_with_savepoint(etcd)
    finally:
        job.close()
        prometheus.stop()
        await operator.stop()
