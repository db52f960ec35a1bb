"""The operator's own storage credentials, as the chart gives them: old savepoints,
and a deleted job's checkpoints, are deleted from S3 (moto's server) by the
`lockgate operator` process on the emulated cluster, whose environment is exactly
what the kubelet makes of the chart's operator container — `operator.env`, and
`operator.envFrom` resolved from the Secret in the release namespace — and nothing
of the test's. Without them each deletion fails, said as a Warning Event on the
job, and the files stay."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import pytest
import pytest_asyncio
from kubernetes import client
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys

from e2e.pod_env import container_env
from tests.helm.chart import NAMESPACE, find, operator_args, render
from tests.helm.test_chart import _parse_operator_args
from tests.operator.cluster_helpers import NAMESPACE as JOB_NAMESPACE
from tests.operator.cluster_helpers import SPEC, Kubectl, StandInDriver
from tests.operator.operator_process import OperatorProcess
from tests.polling import eventually
from tests.s3_server import S3Endpoint, s3_endpoint

CREDENTIALS_SECRET = "lockgate-storage"
# A savepoint a second, one kept; deleting the job deletes its checkpoints.
JOB = {**SPEC, "savepoints": {"interval": "1s", "historySize": 1}, "deletion": {"checkpoints": "delete"}}


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Endpoint]:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)  # whatever reaches the operator comes from its pod spec
    with s3_endpoint(tmp_path / "moto.log", bucket="lockgate-retention") as endpoint:
        yield endpoint


def _values(s3: S3Endpoint, *, credentials: bool) -> dict[str, Any]:
    """The values an admin installs with: the endpoint in env, the keys from a Secret."""
    operator: dict[str, Any] = {
        "checkpointStorage": f"s3://{s3.bucket}/lockgate",
        "env": [
            {"name": "AWS_ENDPOINT_URL", "value": s3.url},
            {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
        ],
    }
    if credentials:
        operator["envFrom"] = [{"secretRef": {"name": CREDENTIALS_SECRET}}]
    # etcd's own guards are the concern of test_bundled_etcd: a plain etcd here.
    return {"operator": operator, "etcd": {"bundled": {"tls": False, "auth": False}}}


async def _secret_data(core: client.CoreV1Api, kind: str, name: str) -> dict[str, str] | None:
    """A Secret of the release namespace as the kubelet reads it for the operator's pod."""
    assert kind == "secret", f"the operator's pod reads no {kind}"
    try:
        secret = await asyncio.to_thread(core.read_namespaced_secret, name, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}


@dataclass
class Installed:
    kubectl: Kubectl
    operator: OperatorProcess
    storage_root: str


@pytest_asyncio.fixture
async def installed(
    request: pytest.FixtureRequest,
    cluster: tuple[kmock.KubernetesEmulator, str],
    etcd_config: EtcdConfig,
    s3: S3Endpoint,
    tmp_path: Path,
) -> AsyncIterator[Installed]:
    """The chart's operator Deployment, as a cluster runs it: the admin's Secret in
    the release namespace, the operator process with its container's environment."""
    emulator, url = cluster
    api = client.ApiClient(client.Configuration(host=url))
    core = client.CoreV1Api(api)
    secret: Any = {  # the client sends a plain mapping as it is
        "metadata": {"name": CREDENTIALS_SECRET},
        "stringData": {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key},
    }
    await asyncio.to_thread(core.create_namespaced_secret, NAMESPACE, secret)
    objects = render(_values(s3, credentials=request.param))
    template = find(objects, "Deployment")[0]["spec"]["template"]
    pod = {"metadata": {"name": "lockgate-operator-0", "namespace": NAMESPACE}, "spec": template["spec"]}
    env = await container_env(
        pod, pod["spec"]["containers"][0], "127.0.0.1", lambda kind, name: _secret_data(core, kind, name)
    )
    root = _parse_operator_args(operator_args(objects)).checkpoint_storage
    operator = await OperatorProcess.start(
        url, etcd_config.endpoints[0], tmp_path, storage_root=root, container_env=env
    )
    try:
        yield Installed(Kubectl(emulator, api), operator, root)
    finally:
        await operator.stop()


def _writer(s3: S3Endpoint) -> Any:
    """A savepoint's files written into S3 with the driver's credentials (the job's pods have their own)."""

    def write(url: str) -> int:
        path = url.removeprefix("s3://")
        s3.filesystem().pipe({f"{path}/_metadata": b"{}", f"{path}/state": b"x" * 1000})
        return 1000

    return write


async def _running_with_savepoints(
    installed: Installed, etcd: Etcd, s3: S3Endpoint
) -> tuple[str, StandInDriver]:
    """A job taking a periodic savepoint a second, keeping one; its name and driver."""
    kubectl, name = installed.kubectl, f"sums-{uuid.uuid4().hex[:6]}"
    await kubectl.apply(name, JOB)
    await eventually(lambda: kubectl.status(name).get("launch") == 1, "the driver is created", timeout_s=60)
    await kubectl.set_pod_phase(f"{name}-driver-1", "Running")
    directory = f"{installed.storage_root}/{JOB_NAMESPACE}/_savepoints/{name}"
    keys = JobKeys(JOB_NAMESPACE, name)
    return name, StandInDriver(kubectl, etcd, keys, savepoint_dir=directory, write_files=_writer(s3))


def _events(kubectl: Kubectl, name: str, reason: str) -> list[str]:
    return [message for _, why, message in kubectl.events(name) if why == reason]


def _checkpoint(installed: Installed, s3: S3Endpoint, name: str) -> str:
    """A file of the job's checkpoint directory in S3, written as its driver writes (with its credentials)."""
    path = f"{installed.storage_root}/{JOB_NAMESPACE}/{name}/chk-1/_metadata".removeprefix("s3://")
    s3.filesystem().pipe(path, b"{}")
    return path


@pytest.mark.parametrize("installed", [True], indirect=True, ids=["credentials-in-envFrom"])
async def test_old_savepoints_and_a_deleted_jobs_checkpoints_are_deleted_with_the_operator_pods_credentials(
    installed: Installed, etcd: Etcd, s3: S3Endpoint
) -> None:
    kubectl = installed.kubectl
    name, driver = await _running_with_savepoints(installed, etcd, s3)
    directory = f"{installed.storage_root}/{JOB_NAMESPACE}/_savepoints/{name}".removeprefix("s3://")
    async with driver.running():  # answering a savepoint a second until the job is deleted
        await eventually(
            lambda: bool(_events(kubectl, name, "SavepointDisposed")),
            f"an old savepoint is disposed of (operator log: {installed.operator.log_tail()})",
            timeout_s=60,
        )
        disposed = _events(kubectl, name, "SavepointDisposed")[0].split(" ")[0]
        assert disposed.startswith(f"s3://{directory}/savepoint-")
        assert not s3.filesystem().exists(disposed.removeprefix("s3://")), "gone from S3, files and all"
        assert s3.filesystem().ls(directory), "the newest is kept"
        checkpoint = _checkpoint(installed, s3, name)
        await kubectl.delete(name)
        await eventually(
            lambda: not s3.filesystem().exists(checkpoint),
            f"the deleted job's checkpoints are deleted (operator log: {installed.operator.log_tail()})",
            timeout_s=60,
        )
    reasons = kubectl.event_reasons(name)
    assert "SavepointDisposalFailed" not in reasons
    assert "CheckpointDeletionFailed" not in reasons


@pytest.mark.parametrize("installed", [False], indirect=True, ids=["no-credentials"])
async def test_without_credentials_each_deletion_fails_as_a_warning_on_the_job_and_the_files_stay(
    installed: Installed, etcd: Etcd, s3: S3Endpoint
) -> None:
    kubectl = installed.kubectl
    name, driver = await _running_with_savepoints(installed, etcd, s3)
    async with driver.running():
        await eventually(
            lambda: bool(_events(kubectl, name, "SavepointDisposalFailed")),
            f"the failed disposal is told (operator log: {installed.operator.log_tail()})",
            timeout_s=60,
        )
        message = _events(kubectl, name, "SavepointDisposalFailed")[0]
        path = message.split(" ")[0]
        assert "NoCredentialsError" in message, message
        assert s3.filesystem().exists(path.removeprefix("s3://")), "nothing deleted"

        def kept_with_why() -> bool:  # the event is posted before the status is written
            entry = next(e for e in kubectl.status(name)["savepoints"] if e["path"] == path)
            return "NoCredentialsError" in entry.get("error", "")

        await eventually(kept_with_why, "kept in the history, with why, to be tried again", timeout_s=30)
        checkpoint = _checkpoint(installed, s3, name)
        await kubectl.delete(name)
        await eventually(
            lambda: bool(_events(kubectl, name, "CheckpointDeletionFailed")),
            f"the failed deletion of the checkpoints is told (operator log: {installed.operator.log_tail()})",
            timeout_s=60,
        )
    (message,) = _events(kubectl, name, "CheckpointDeletionFailed")
    assert f"{installed.storage_root}/{JOB_NAMESPACE}/{name}" in message
    assert "NoCredentialsError" in message
    assert s3.filesystem().exists(checkpoint), "nothing deleted"
    assert kubectl.job(name)["metadata"]["finalizers"], "the job stays until they are deleted"
    assert "SavepointDisposed" not in kubectl.event_reasons(name)
