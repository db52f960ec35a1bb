"""The executor pods Spark creates for a launch's driver, as the scenarios see them."""

from __future__ import annotations

from typing import Any

from e2e.kubectl import Kubectl
from e2e.word_count_job import WordCountJob
from tests.polling import eventually_true

# Spark's allocator creates the pods once the driver's SparkContext is up, each
# then starts a JVM: on a loaded 2-core machine that takes a minute or two.
APPEAR_WITHIN_S = 180


def _of_launch(pod: dict[str, Any], job: WordCountJob, launch: int) -> bool:
    # spark.kubernetes.executor.podNamePrefix is `<job>-<launch>`
    return str(pod["metadata"]["name"]).startswith(f"{job.name}-{launch}-exec-")


async def executor_pods(kubectl: Kubectl, job: WordCountJob, launch: int) -> list[dict[str, Any]]:
    """Every executor pod of driver `launch` the API server has, whatever its phase."""
    pods = await kubectl.pods(job.names.executor_selector)
    return [pod for pod in pods if _of_launch(pod, job, launch)]


async def running_executor_pods(kubectl: Kubectl, job: WordCountJob, launch: int) -> list[str]:
    """The names of driver `launch`'s executor pods that run and are not being deleted."""
    return [
        pod["metadata"]["name"]
        for pod in await executor_pods(kubectl, job, launch)
        if (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    ]


async def executors_are(kubectl: Kubectl, job: WordCountJob, launch: int, count: int) -> list[str]:
    """Waits until driver `launch` has exactly `count` running executor pods; their names."""
    names: list[str] = []

    async def there() -> bool:
        nonlocal names
        names = await running_executor_pods(kubectl, job, launch)
        return len(names) == count

    await eventually_true(there, f"{count} executor pod(s) of launch {launch}", APPEAR_WITHIN_S, 0.3)
    return names


async def executors_gone(kubectl: Kubectl, job: WordCountJob, launch: int) -> None:
    """Waits until the API server has no executor pod of driver `launch` left."""

    async def gone() -> bool:
        return not await executor_pods(kubectl, job, launch)

    await eventually_true(gone, f"launch {launch}'s executor pods are gone", APPEAR_WITHIN_S, 0.3)
