"""With etcd auth on, the operator gives each job an etcd user of its own: a new
password each launch, in a Secret only the driver reads, a role reaching only the
job's keys, removed with the job. Real etcd with auth enabled; the emulated API
server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import pytest_asyncio
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys

from tests.etcd_auth import as_user
from tests.operator.cluster_helpers import JOBS, NAMESPACE, SPEC, Kubectl, StandInDriver
from tests.operator.conftest import Operator
from tests.operator.test_operator import PODS, SECRETS, _launched
from tests.polling import eventually


@pytest_asyncio.fixture
async def operator(
    cluster: tuple[kmock.KubernetesEmulator, str], root_config: EtcdConfig, tmp_path: Path
) -> AsyncIterator[Operator]:
    running = Operator(cluster[1], root_config, f"file://{tmp_path}/checkpoints", etcd_job_users=True)
    await running.start()
    yield running
    if running.task is not None:
        await running.stop()


@pytest.fixture
def kubectl(cluster: tuple[kmock.KubernetesEmulator, str], operator: Operator) -> Kubectl:
    return Kubectl(cluster[0], operator.api())


def _credentials(kubectl: Kubectl, root: EtcdConfig, pod: dict[str, Any]) -> EtcdConfig:
    """What the driver pod gets: `--etcd-user` and the password from the job's Secret."""
    container = pod["spec"]["containers"][0]
    args = container["args"]
    user = args[args.index("--etcd-user") + 1]
    (env,) = [e for e in container["env"] if e["name"] == "LOCKGATE_ETCD_PASSWORD"]
    reference = env["valueFrom"]["secretKeyRef"]
    secret = kubectl.get(SECRETS, reference["name"])
    password = base64.b64decode(secret["data"][reference["key"]]).decode()
    return as_user(root, user, password)


async def _refused(config: EtcdConfig) -> None:
    with pytest.raises(EtcdAccessError, match="authentication failed"):
        async with Etcd(config):
            pass


async def test_each_job_reaches_etcd_as_its_own_user_new_each_launch_and_gone_with_the_job(
    kubectl: Kubectl, root_config: EtcdConfig
) -> None:
    mine, theirs = JobKeys(NAMESPACE, "orders"), JobKeys(NAMESPACE, "payments")
    await kubectl.apply(mine.job, SPEC)
    await kubectl.apply(theirs.job, SPEC)
    pod = await _launched(kubectl, mine.job, 1)
    first = _credentials(kubectl, root_config, pod)
    assert first.username == f"lockgate/{NAMESPACE}/orders"
    secret = kubectl.get(SECRETS, "orders-lockgate-etcd")
    assert secret["metadata"]["ownerReferences"][0]["name"] == "orders", "it goes with the job"
    assert "--etcd-user" in (await _launched(kubectl, theirs.job, 1))["spec"]["containers"][0]["args"]

    async with Etcd(first) as etcd:
        # What a driver does with its keys (heartbeat on a lease, savepoints by watch)
        # works as the job's user; the other job's keys are out of reach.
        driver = StandInDriver(kubectl, etcd, mine)
        async with driver.running():
            await kubectl.set_pod_phase("orders-driver-1", "Running")
            await eventually(lambda: kubectl.status(mine.job).get("phase") == "Running", "orders runs")
            with pytest.raises(EtcdAccessError, match="may not get key b'/lockgate/streams/payments/status'"):
                await etcd.get(theirs.status)
            await kubectl.patch_spec(mine.job, {"replicas": 3})  # a rescale: savepoint, stop, launch 2
            second = _credentials(kubectl, root_config, await _launched(kubectl, mine.job, 2))
    assert second.password != first.password
    await _refused(first)  # a task of launch 1 can no longer reach etcd
    async with Etcd(second) as etcd:
        await etcd.put(mine.status, b"launch 2 writes")

    await kubectl.delete(mine.job)
    await eventually(lambda: not kubectl.exists(JOBS, mine.job), "the job is gone")
    await _refused(second)
    assert kubectl.exists(PODS, "payments-driver-1"), "the other job runs on"
    async with Etcd(_credentials(kubectl, root_config, kubectl.get(PODS, "payments-driver-1"))) as etcd:
        await etcd.put(theirs.status, b"still mine")
