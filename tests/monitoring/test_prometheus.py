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
from tests.operator.cluster_helpers import NAMESPACE, SPEC, Kubectl
from tests.operator.operator_process import OperatorProcess, free_port
from tests.polling import eventually, eventually_true
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
        # A StreamingJob beside it: no kubelet runs its driver here, so it stays
        # Deploying, and the savepoint its trigger nonce asks for times out — which
        # gives the operator's duration panels their data.
        kubectl = Kubectl(emulator, client.ApiClient(client.Configuration(host=api_url)))
        await kubectl.apply("sums", {**SPEC, "savepoints": {"timeout": "1s"}})
        # A change once the creation is handled (a change before it would be part of it).
        await eventually(lambda: kubectl.status("sums").get("launch") == 1, "the job's first launch")
        await kubectl.patch_spec("sums", {"savepoints": {"timeout": "1s", "triggerNonce": 1}})

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
        # Both jobs picked in the dashboard's variables: the running one, and the operator's.
        picked = (f"{keys.namespace}|{NAMESPACE}", f"{keys.job}|sums")
        for panel in panels(*picked, RATE_INTERVAL):

            async def panel_has_data(queries: list[str] = panel.queries) -> bool:
                return any([await has_data(q) for q in queries])

            await eventually_true(panel_has_data, f"panel {panel.title!r} shows data", 60)
        for rule in alert_rules():
            answer = await asyncio.to_thread(prometheus.query, rule["expr"])
            assert answer["status"] == "success", (rule["alert"], answer)
            about_it = [r for r in answer["data"]["result"] if r["metric"].get("job_id") in (None, keys.job)]
            assert about_it == [], f"{rule['alert']} fires on a healthy job"

        await job.stop_with_savepoint(etcd)
    finally:
        job.close()
        prometheus.stop()
        await operator.stop()
