"""The end-to-end scenarios run on the emulated cluster here, and on a real
cluster (kind) as well when KUBECONFIG points at one: see e2e/README.md."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from lockgate.runtime.coordination.etcd import EtcdConfig

from e2e.emulated import EmulatedCluster
from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.word_count_job import WordCountJob
from tests.s3_server import S3Endpoint, s3_endpoint


@pytest.fixture
def executor_pods() -> bool:
    """Whether the emulated cluster's drivers get executor pods from Spark's Kubernetes
    backend (True) or run Spark's executors as local threads; a module overrides it."""
    return False


@pytest_asyncio.fixture(params=["emulated", "kind"])
async def platform(
    request: pytest.FixtureRequest,
    etcd_config: EtcdConfig,
    tmp_path: Path,
    executor_pods: bool,
    s3: S3Endpoint | None,
) -> AsyncIterator[Platform]:
    if request.param == "emulated":
        # The operator's storage root: the jobs keep their state inside it (the security model).
        root = None if s3 is None else f"s3://{s3.bucket}/checkpoints"
        async with EmulatedCluster.running(
            etcd_config, tmp_path, executor_pods=executor_pods, storage_root=root
        ) as emulated:
            yield emulated
        return
    if not os.environ.get("KUBECONFIG"):
        pytest.skip(
            "no real cluster: KUBECONFIG is not set. Kubernetes cannot run on this machine; "
            "e2e/README.md shows how to run these scenarios against kind"
        )
    from e2e.kind import KindCluster  # noqa: PLC0415 — reads its settings only when asked for

    async with KindCluster.connected() as kind:
        yield kind


@pytest.fixture
def kubectl(platform: Platform) -> Kubectl:
    return Kubectl(platform.api, platform.namespace)


@pytest.fixture
def object_storage() -> bool:
    """Whether the job keeps checkpoints and output in S3 (moto's server) instead of
    the shared directory; a module overrides it. Emulated cluster only: a kind
    cluster's pods cannot reach a server on this machine's loopback."""
    return False


@pytest.fixture
def s3(
    object_storage: bool, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[S3Endpoint | None]:
    """The S3 endpoint of a module that asks for object storage, started before the
    platform (its operator's storage root is there). Emulated cluster only."""
    if not object_storage or request.node.callspec.params.get("platform") != "emulated":
        yield None
        return
    with s3_endpoint(tmp_path / "moto.log") as endpoint:
        for name, value in endpoint.environment.items():  # the test (and the operator) read storage
            monkeypatch.setenv(name, value)
        yield endpoint


@pytest.fixture
def job(platform: Platform, kubectl: Kubectl, s3: S3Endpoint | None) -> WordCountJob:
    return WordCountJob(platform, kubectl, f"words-{uuid.uuid4().hex[:6]}", s3)
