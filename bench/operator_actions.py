"""How long a user waits for each action on a job, through the operator, on the
emulated cluster of the end-to-end suite (e2e/README.md): the real operator
process, real etcd, real spark-submit drivers run by the pod runner.

Each time runs from the request (the API call `kubectl` makes) until the job
is Running again on its new driver, a heartbeat of that driver seen, and the
lines appended before the action are committed exactly once:

    .venv/bin/python bench/operator_actions.py [--rounds 3] [--executor-pods] [--only-apply-and-scale-up]

With --executor-pods, each driver's Spark asks the emulated API server for its
executor pods, which the pod runner runs; without, executors are local threads.
--only-apply-and-scale-up times the first two actions only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lockgate.runtime.coordination.etcd import EtcdConfig  # noqa: E402
from lockgate.runtime.coordination.etcd_server import EtcdServer  # noqa: E402

from e2e.emulated import EmulatedCluster  # noqa: E402
from e2e.kubectl import Kubectl  # noqa: E402
from e2e.word_count_job import WordCountJob  # noqa: E402


async def _timed(job: WordCountJob, act: Awaitable[None], launch: int, replicas: int | None = None) -> float:
    job.words.append()
    started = time.monotonic()
    await act
    await job.running(launch, replicas)
    await job.output_is_exact()
    return time.monotonic() - started


async def one_round(cluster: EmulatedCluster, round_number: int, all_actions: bool) -> dict[str, float]:
    kubectl = Kubectl(cluster.api, cluster.namespace)
    job = WordCountJob(cluster, kubectl, f"bench-{round_number}")
    times = {"apply → Running at 2": await _timed(job, job.apply(), launch=1, replicas=2)}
    times["kubectl scale 2 → 4"] = await _timed(job, kubectl.scale(job.name, 4), launch=2, replicas=4)
    if not all_actions:
        await kubectl.delete(job.name)
        return times
    times["kubectl scale 4 → 1"] = await _timed(job, kubectl.scale(job.name, 1), launch=3, replicas=1)
    times["driver killed → Running"] = await _timed(job, cluster.kill_driver(job.driver_pod(3)), launch=4)
    started = time.monotonic()
    await kubectl.patch(job.name, {"state": "suspended"})
    await job.wait_for(lambda s: s.get("phase") == "Suspended", "Suspended")
    times["suspend → Suspended"] = time.monotonic() - started
    times["resume → Running"] = await _timed(job, kubectl.patch(job.name, {"state": "running"}), launch=5)
    await kubectl.delete(job.name)
    return times


async def main(rounds: int, executor_pods: bool, all_actions: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        server = EtcdServer(workdir / "etcd")
        server.start()
        try:
            etcd = EtcdConfig((server.endpoint,))
            async with EmulatedCluster.running(etcd, workdir, executor_pods=executor_pods) as cluster:
                results = [await one_round(cluster, n, all_actions) for n in range(rounds)]
        finally:
            server.stop()
    print("| action | median (s) | min (s) | max (s) |\n|---|---:|---:|---:|")
    for action in results[0]:
        values = [r[action] for r in results]
        print(f"| {action} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executor-pods", action="store_true", help="executors as pods, not local threads")
    parser.add_argument("--only-apply-and-scale-up", action="store_true", help="time the first two actions")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.executor_pods, not arguments.only_apply_and_scale_up))
