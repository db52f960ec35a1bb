"""`kubectl scale` on a job, carried out by its running driver: the driver pod
stays (same UID), Spark adds executor pods before the old tasks stop and removes
the surplus after the new ones run (make before break), the state is redistributed by key group from
a checkpoint — and not a word counted twice or lost. Checkpoints and output are
in S3 (moto's server), the credentials in a Secret."""

from __future__ import annotations

from datetime import datetime

import pytest
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import RescaleResult, decode

from e2e import executor_pods as pods
from e2e.executor_pods import executors_are
from e2e.kubectl import Kubectl
from e2e.word_count_job import WordCountJob


async def _rescale_result(job: WordCountJob, generation: int) -> RescaleResult:
    """What the driver answered the operator's request for `generation`."""
    async with Etcd(job.platform.etcd) as etcd:
        data = await etcd.get(job.keys.rescale_result(f"generation-{generation}"))
    assert data is not None, f"no answer to the rescale of generation {generation}"
    return decode(RescaleResult, data)


async def _made_before_break(job: WordCountJob, kubectl: Kubectl, generation: int, new: int) -> None:
    """The `new` newest executor pods were created before the old tasks were told to
    stop: their start was not part of the rescale's pause."""
    stopped_ms = (await _rescale_result(job, generation)).stopped_ms
    assert stopped_ms is not None
    created = sorted(
        datetime.fromisoformat(pod["metadata"]["creationTimestamp"]).timestamp()
        for pod in await pods.executor_pods(kubectl, job, launch=1)
    )
    # creationTimestamp has whole seconds
    assert all(at <= stopped_ms / 1000 for at in created[-new:]), (created, stopped_ms)


async def _driver_uid(job: WordCountJob, kubectl: Kubectl) -> str:
    pod = await kubectl.pod(job.driver_pod(1))
    assert pod is not None, "the driver pod of launch 1 is there"
    return str(pod["metadata"]["uid"])


async def _runs_at(job: WordCountJob, kubectl: Kubectl, to: int, generation: int) -> None:
    """Running at `to` on driver 1, the scale's generation carried out, executors following."""
    await job.wait_for(
        lambda s: (
            s.get("replicas") == to and s.get("observedGeneration") == generation and s.get("launch") == 1
        ),
        f"running at {to} by driver 1, generation {generation}",
    )
    driver = await job.driver_says()
    assert driver is not None
    assert (driver.state, driver.parallelism) == ("running", to)
    await executors_are(kubectl, job, launch=1, count=to)


@pytest.fixture
def executor_pods() -> bool:
    return True


@pytest.fixture
def object_storage() -> bool:
    return True


@pytest.mark.timeout(600)
async def test_scaling_up_and_down_keeps_the_driver_and_carries_the_state_over_exactly(
    job: WordCountJob, kubectl: Kubectl
) -> None:
    job.words.append()
    await job.apply(replicas=2)
    await job.running(launch=1, replicas=2)
    await executors_are(kubectl, job, launch=1, count=2)
    await job.output_is_exact()
    uid = await _driver_uid(job, kubectl)

    job.words.append()  # in flight while the tasks stop at a checkpoint
    await kubectl.scale(job.name, 4)
    await _runs_at(job, kubectl, 4, generation=2)
    await _made_before_break(job, kubectl, generation=2, new=2)
    job.words.append()
    await job.output_is_exact()

    # A scale while the last one may still settle, then another: carried out in turn.
    await kubectl.scale(job.name, 3)
    await kubectl.scale(job.name, 1)
    await _runs_at(job, kubectl, 1, generation=4)
    job.words.append()
    await job.output_is_exact()

    assert await _driver_uid(job, kubectl) == uid, "the same driver pod all along"
    status = await job.status()
    assert "savepoints" not in status or status["savepoints"] == [], "no savepoint was needed"
    reasons = await kubectl.event_reasons(job.name)
    assert reasons.count("RescaledInPlace") >= 2, reasons
    assert "InPlaceRescaleFallback" not in reasons, reasons
    assert "StoppingDriver" not in reasons, reasons
