"""The real kopf operator against kmock's KubernetesEmulator (the one stand-in:
no API server can be installed here) and a real etcd; a stand-in driver that
answers through etcd as the runtime's driver does."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import kopf
import pytest
import pytest_asyncio
from kubernetes import client
from lockgate.operator.driver_pod import Cluster
from lockgate.operator.handlers import configure, register
from lockgate.operator.job import OperatorContext
from lockgate.operator.job_etcd import JobEtcd
from lockgate.operator.job_policy import JobPolicy
from lockgate.operator.kube import Kube
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.engine.restart import restart_strategy

from tests.operator.fake_kube import FakeKube
from tests.operator.job_under_test import JobUnderTest, RecordedEvents

# A lost driver relaunched after 0.1 s, not 10: the tests wait for it.
QUICK_RELAUNCH = restart_strategy("exponential-backoff", delay_s=0.1, max_delay_s=0.1)


@dataclass
class Operator:
    """The operator, started and stopped by the test (to restart it mid-upgrade)."""

    url: str
    etcd_config: EtcdConfig
    storage: str
    etcd_job_users: bool = False  # as the operator started with --etcd-user (etcd auth on)
    policy: JobPolicy = field(default_factory=JobPolicy)  # the switches it started with
    task: asyncio.Task[None] | None = None
    context: OperatorContext | None = None
    stop_flag: asyncio.Event = field(default_factory=asyncio.Event)
    not_kopfs: set[asyncio.Task[Any]] = field(default_factory=set)
    root_tasks: Collection[asyncio.Task[Any]] = ()

    def api(self) -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=self.url))

    async def start(self) -> None:
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=self.url)

        endpoints = ",".join(self.etcd_config.endpoints)
        self.context = context = OperatorContext(
            Kube(self.api()),
            JobEtcd(self.etcd_config),
            Cluster(endpoints, self.storage, etcd_job_users=self.etcd_job_users),
            self.policy,
            driver_exit_timeout_s=10,
            namespace_recheck_s=0.5,
            lost_driver_backoff=QUICK_RELAUNCH,
        )
        register(registry, context, observe_every_s=0.3)
        settings = configure(kopf.OperatorSettings())
        settings.watching.reconnect_backoff = 0.1
        self.stop_flag = asyncio.Event()
        ready = asyncio.Event()
        # kopf.operator counts every task created after it started as one of its own
        # and, stopping, waits up to 5 s for them to end: the test's task, and kopf's
        # own API requests that retry once their credentials are gone.
        self.not_kopfs = set(asyncio.all_tasks())

        async def run() -> None:
            self.root_tasks = await kopf.spawn_tasks(
                registry=registry,
                settings=settings,
                clusterwide=True,
                standalone=True,  # peers run as processes: see operator_process.py
                stop_flag=self.stop_flag,
                ready_flag=ready,
            )
            await kopf.run_tasks(self.root_tasks, ignored=self.not_kopfs)

        self.task = asyncio.create_task(run())
        await asyncio.wait_for(ready.wait(), 10)

    async def stop(self) -> None:
        """The operator stopped as by its stop flag; once its root tasks have ended (its
        handlers, watchers and clean-up), what kopf would still wait for is cancelled."""
        assert self.task is not None
        current = asyncio.current_task()
        if current is not None:
            self.not_kopfs.add(current)
        self.stop_flag.set()
        await asyncio.wait(self.root_tasks, timeout=40)
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.task = None


@pytest_asyncio.fixture
async def operator(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_config: EtcdConfig, tmp_path: Path
) -> AsyncIterator[Operator]:
    running = Operator(cluster[1], etcd_config, f"file://{tmp_path}/checkpoints")
    await running.start()
    yield running
    if running.task is not None:
        await running.stop()


@pytest.fixture
def job_name() -> str:
    return f"sums-{uuid.uuid4().hex[:6]}"


@pytest_asyncio.fixture
async def under_test(etcd_config: EtcdConfig, tmp_path: Path) -> AsyncIterator[JobUnderTest]:
    kube, job_etcd = FakeKube(), JobEtcd(etcd_config)
    cluster = Cluster(",".join(etcd_config.endpoints), f"file://{tmp_path}/checkpoints")
    context = OperatorContext(kube, job_etcd, cluster, driver_exit_timeout_s=10)
    yield JobUnderTest(kube, context, RecordedEvents(), f"sums-{uuid.uuid4().hex[:6]}")
    await job_etcd.close()
