"""`lockgate operator` as users start it: a process with a kubeconfig."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import kmock
from kubernetes import client

from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.operator.operator_process import LOCKGATE, OperatorProcess
from tests.polling import eventually, eventually_true


async def test_the_operator_command_reconciles_a_job(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_server, tmp_path: Path
) -> None:
    emulator, url = cluster
    operator = await OperatorProcess.start(url, etcd_server.endpoint, tmp_path)
    try:
        kubectl = Kubectl(emulator, client.ApiClient(client.Configuration(host=url)))
        await kubectl.apply("cli-job", SPEC)
        try:
            await eventually(
                lambda: kubectl.exists("v1/pods", "cli-job-driver-1"), "the driver pod is created", 30
            )
        except AssertionError:
            raise AssertionError(operator.log_tail()) from None
        created = 'lockgate_operator_reconciles_total{handler="create",result="ok"} 1.0'
        scraped: list[str] = []

        async def counted() -> bool:
            scraped.append(await operator.metrics())
            return created in scraped[-1]

        await eventually_true(counted, "the create handler is counted in the scraped metrics")
        assert 'lockgate_operator_jobs{phase="Deploying"} 1.0' in scraped[-1]
        # Per job, so that an alert can name the one that failed.
        assert (
            'lockgate_job_phase{job_id="cli-job",job_namespace="streams",phase="Deploying"} 1.0'
            in scraped[-1]
        )
        assert (
            'lockgate_job_phase{job_id="cli-job",job_namespace="streams",phase="Failed"} 0.0' in scraped[-1]
        )
        assert 'lockgate_build_info{python="' in scraped[-1]
    finally:
        assert await operator.stop() == 0, operator.log_tail()


def test_the_operator_command_needs_etcd_and_a_scope(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_ETCD"}
    no_etcd = subprocess.run(
        [LOCKGATE, "operator", "-A"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert no_etcd.returncode == 1
    assert "--etcd (or $LOCKGATE_ETCD) is required" in no_etcd.stderr
    no_scope = subprocess.run(
        [LOCKGATE, "operator", "--etcd", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert no_scope.returncode == 1
    assert "--namespace NS" in no_scope.stderr
