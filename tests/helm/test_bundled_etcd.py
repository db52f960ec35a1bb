"""The etcd attacker without credentials, against the chart's etcd settings: the
bundled etcd as the chart runs it (tests/helm/chart_etcd.py), its authentication
enabled by the operator's own start-up step, and a client of each kind a pod of
the cluster could be: none reaches a job's keys but the operator and the job."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator

import pytest
from lockgate.runtime.coordination.etcd import Etcd, EtcdAccessError, EtcdConfig, EtcdUnavailableError
from lockgate.runtime.coordination.etcd_auth import enable_auth
from lockgate.runtime.coordination.job_identity import JobIdentity, grant, new_password
from lockgate.runtime.coordination.keys import JobKeys

from tests.helm.chart import render
from tests.helm.chart_etcd import ChartEtcd, chart_etcd
from tests.operator.operator_process import LOCKGATE

ORDERS = JobKeys("team-a", "orders")
PAYMENTS = JobKeys("team-b", "payments")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartEtcd]:
    with chart_etcd(render(), tmp_path_factory.mktemp("chart-etcd")) as etcd:
        yield etcd


async def _get(config: EtcdConfig, key: bytes) -> bytes | None:
    async with Etcd(config) as etcd:
        return await etcd.get(key)


async def _put(config: EtcdConfig, key: bytes, value: bytes) -> None:
    async with Etcd(config) as etcd:
        await etcd.put(key, value)


async def _delete(config: EtcdConfig, key: bytes) -> None:
    async with Etcd(config) as etcd:
        await etcd.delete(key)


async def test_without_a_certificate_nobody_reaches_it_even_before_auth_is_on(bundled: ChartEtcd) -> None:
    """From its first start: the window before the operator enables auth is closed by TLS."""
    with pytest.raises(EtcdUnavailableError):
        await _get(bundled.without_certificate(), ORDERS.coordinator)
    plain = EtcdConfig((bundled.endpoint.replace("https://", "http://"),), retries=2, request_timeout_s=2)
    with pytest.raises(EtcdUnavailableError):
        await _put(plain, ORDERS.coordinator, b"attacker")


@pytest.fixture(scope="module")
def job_password(bundled: ChartEtcd) -> str:
    return asyncio.run(_operator_start(bundled))


async def _operator_start(bundled: ChartEtcd) -> str:
    """What the operator does: enable auth at its start, then a user for each job."""
    assert await enable_auth(bundled.operator), "the chart's etcd starts with auth off"
    assert not await enable_auth(bundled.operator), "an operator restart finds it on"
    password = new_password()
    async with Etcd(bundled.operator) as operator:
        await grant(operator, JobIdentity(ORDERS), password)
        await operator.put(ORDERS.coordinator, b"driver-1")
        await operator.put(PAYMENTS.coordinator, b"driver-7")
    return password


async def _touch(config: EtcdConfig, operation: str) -> None:
    """What an attacker does with a job's keys: read its coordinator, ask it for a
    savepoint into a directory of the attacker's, delete its coordinator key."""
    if operation == "get":
        await _get(config, ORDERS.coordinator)
    elif operation == "put":
        await _put(config, ORDERS.savepoint_request("loot"), b'{"directory": "s3://attacker/loot"}')
    else:
        await _delete(config, ORDERS.coordinator)


@pytest.mark.parametrize("operation", ["get", "put", "delete"])
async def test_a_client_without_a_certificate_cannot_touch_a_jobs_keys(
    bundled: ChartEtcd, job_password: str, operation: str
) -> None:
    with pytest.raises(EtcdUnavailableError):
        await _touch(bundled.without_certificate(), operation)


@pytest.mark.parametrize("operation", ["get", "put", "delete"])
async def test_the_jobs_certificate_without_a_user_cannot_touch_a_jobs_keys(
    bundled: ChartEtcd, job_password: str, operation: str
) -> None:
    """What a job's code holds besides its own user: the client certificate every job mounts."""
    with pytest.raises(EtcdAccessError, match="may not"):
        await _touch(bundled.with_certificate(), operation)
    assert await _get(bundled.operator, ORDERS.coordinator) == b"driver-1"
    assert await _get(bundled.operator, ORDERS.savepoint_request("loot")) is None


async def test_a_guessed_root_password_is_refused(bundled: ChartEtcd, job_password: str) -> None:
    with pytest.raises(EtcdAccessError, match="refused user 'root'"):
        await _get(bundled.with_certificate("root", "password"), ORDERS.coordinator)


async def test_a_job_reaches_its_own_keys_and_no_other_jobs(bundled: ChartEtcd, job_password: str) -> None:
    orders = bundled.with_certificate(JobIdentity(ORDERS).name, job_password)
    assert await _get(orders, ORDERS.coordinator) == b"driver-1"
    await _put(orders, ORDERS.status, b"{}")
    with pytest.raises(EtcdAccessError, match="may not get"):
        await _get(orders, PAYMENTS.coordinator)
    with pytest.raises(EtcdAccessError, match="may not delete"):
        await _delete(orders, PAYMENTS.coordinator)


async def test_the_operators_credentials_read_and_write_every_jobs_keys(
    bundled: ChartEtcd, job_password: str
) -> None:
    await _put(bundled.operator, PAYMENTS.status, b"{}")
    assert await _get(bundled.operator, PAYMENTS.coordinator) == b"driver-7"
    assert await _get(bundled.operator, ORDERS.status) is not None


def test_the_operator_may_enable_auth_only_where_certificates_guard_etcd() -> None:
    """`--etcd-enable-auth` on an etcd that admits anyone would open a window: refused before connecting."""
    command = [LOCKGATE, "operator", "--etcd", "http://127.0.0.1:1", "-A", "--metrics-port", "0"]
    command += ["--etcd-user", "root", "--etcd-enable-auth"]
    env = {**os.environ, "LOCKGATE_ETCD_PASSWORD": "p"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert (
        "--etcd-enable-auth with --etcd http://127.0.0.1:1: enabling etcd's authentication needs https"
        in (result.stderr)
    )
