"""Make before break with executor pods: a driver's Spark (Kubernetes backend, the
emulated API server, executor pods run by the pod runner) reserving executors
for a higher parallelism gets a new executor pod while its running barrier stage
keeps going, and releasing after a scale-down deletes the surplus pod; executors
that do not register within the bound are refused, naming the numbers.

The driver is e2e/reserving_driver.py, a process of this machine as the driver
pods' are; what a rescale does around the executors is all there is to it here."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes import client
from lockgate.runtime.coordination.cancellation import within

from e2e.kubectl import Kubectl
from e2e.local_pod import REPOSITORY
from e2e.log_tail import telling_tail
from e2e.pod_runner import PodRunner
from tests.kube_emulator import add_namespace, emulated_api_server
from tests.polling import eventually_true

NAMESPACE = "spark"
PREFIX = "reserve"
EXECUTORS = "spark-role=executor"
STEP_WITHIN_S = 150  # an executor pod's JVM starting on a loaded 2-core machine


class Driver:
    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process, self.log = process, log
        self.steps: dict[str, dict[str, Any]] = {}

    async def reached(self, step: str) -> dict[str, Any]:
        """Waits until the driver reports `step`; what it reported."""
        assert self.process.stdout is not None
        while step not in self.steps:
            try:
                line = await within(self.process.stdout.readline(), STEP_WITHIN_S)
            except TimeoutError:
                raise AssertionError(f"no {step!r} within {STEP_WITHIN_S} s:\n{self.diagnostics()}") from None
            if not line:
                await self.process.wait()
                raise AssertionError(
                    f"the driver exited ({self.process.returncode}) before {step!r}:\n{self.diagnostics()}"
                )
            if line.startswith(b"{"):
                report = json.loads(line)
                self.steps[report["step"]] = report
        return self.steps[step]

    def diagnostics(self) -> str:
        return telling_tail(self.log.read_text(errors="replace"))


@pytest_asyncio.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Kubectl, str]]:
    async with emulated_api_server() as (emulator, url):
        add_namespace(emulator, NAMESPACE, {})
        api = client.ApiClient(client.Configuration(host=url))
        runner = PodRunner(api, NAMESPACE, tmp_path / "pods", executor_pods=True)
        async with runner.running():
            yield Kubectl(api, NAMESPACE), url


@pytest_asyncio.fixture
async def driver(cluster: tuple[Kubectl, str], tmp_path: Path) -> AsyncIterator[Driver]:
    _, url = cluster
    workdir = tmp_path / "work"
    workdir.mkdir()
    log = tmp_path / "driver.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "e2e.reserving_driver",
            url,
            NAMESPACE,
            PREFIX,
            str(workdir),
            cwd=REPOSITORY,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        yield Driver(process, log)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _executor_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    return [p for p in await kubectl.pods(EXECUTORS) if p["metadata"]["name"].startswith(f"{PREFIX}-exec-")]


async def _running(kubectl: Kubectl) -> list[str]:
    return [
        pod["metadata"]["name"]
        for pod in await _executor_pods(kubectl)
        if (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    ]


@pytest.mark.timeout(400)
async def test_reserving_adds_an_executor_pod_while_the_stage_runs_and_releasing_deletes_it(
    cluster: tuple[Kubectl, str], driver: Driver, tmp_path: Path
) -> None:
    kubectl, _ = cluster
    ticks, stop = tmp_path / "work" / "ticks", tmp_path / "work" / "stop"
    first = await driver.reached("old stage runs")
    assert len(first["executors"]) == 1
    assert len(await _running(kubectl)) == 1

    await driver.reached("reserving")
    await eventually_true(
        lambda: _count_is(kubectl, 2), "Spark creates a second executor pod", STEP_WITHIN_S, 0.3
    )
    ticked = int(ticks.read_text())

    async def still_ticking() -> bool:
        return int(ticks.read_text()) > ticked

    await eventually_true(still_ticking, "the old stage goes on as the new executor starts", 10)
    assert not stop.exists(), "the old stage was not stopped for the new executor"

    reserved = await driver.reached("reserved")
    assert len(reserved["executors"]) == 2, reserved
    assert reserved["old_stage_running"], "the old stage ran until the executors were there"
    new_stage = await driver.reached("new stage ran")
    assert len(set(new_stage["addresses"])) == 2, "the new stage's two tasks ran on the two executors"

    released = await driver.reached("released")
    assert len(released["registered"]) == 1, released

    async def surplus_pod_deleted() -> bool:
        return len(await _executor_pods(kubectl)) == 1

    await eventually_true(surplus_pod_deleted, "the surplus executor pod is deleted", 60, 0.3)
    (tmp_path / "work" / "finish").touch()
    refused = await driver.reached("refused")
    assert (refused["asked"], refused["registered"]) == (3, 1), refused
    assert "asked Spark for 3 executor(s) for parallelism 3" in refused["message"]
    assert "1 registered within the 0 s bound" in refused["message"]
    assert await driver.process.wait() == 0, driver.diagnostics()


async def _count_is(kubectl: Kubectl, count: int) -> bool:
    return len(await _running(kubectl)) == count
