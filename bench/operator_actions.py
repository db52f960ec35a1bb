"""How long a user waits for each action on a job, through the operator, on the
emulated cluster of the end-to-end suite (e2e/README.md): the real operator
process, real etcd, real spark-submit drivers run by the pod runner.

Each time runs from the request (the API call `kubectl` makes) until the job
is Running again on its new driver, a heartbeat of that driver seen, and the
lines appended before the action are committed exactly once.

`kubectl scale` is carried out in place by the running driver (issue 36): its
time runs until the job is Running at the new replicas on the same driver pod
(same UID, checked) with the scale's generation observed, then until the new
number of executor pods runs (with --executor-pods; the surplus ones of a
scale-down are gone), and until the lines appended before it are committed
exactly once. Beside it, from the driver's rescale result in etcd (wall-clock
times: the pods run on this machine): from the request until the driver told
the old tasks to stop (the new executors are reserved meanwhile, the job still
processing: make before break), and from then until its new launch started the
new tasks (the stage handover inside the driver; the new tasks then restore
and read).

    .venv/bin/python bench/operator_actions.py [--rounds 3] [--executor-pods] [--only-apply-and-scale]

With --executor-pods, each driver's Spark asks the emulated API server for its
executor pods, which the pod runner runs; without, executors are local threads.
--only-apply-and-scale times the first three actions only (apply, 2 → 4, 4 → 1).

--sink-downtime runs `bench/state_job.py` instead (a source of `--rate` records
per second, 8,000 keys of 100 bytes, its sink noting when each batch is written:
`arrival_sink.py`; the pods run on this machine, so their monotonic clock is
the benchmark's) and times `kubectl scale` 2 → 4 and 4 → 1 as
`rescale_downtime.py` does: the longest gap in which no batch reached the sink,
and until the first and the last new subtask wrote; the same driver pod (UID)
throughout; at the end the job is suspended (a savepoint) and its committed
output checked exactly (`rescale_downtime.check_output`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arrival_sink import WINDOW_S, arrivals, flow, launches
from rescale_downtime import check_output

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig  # noqa: E402
from lockgate.runtime.coordination.etcd_server import EtcdServer  # noqa: E402
from lockgate.runtime.coordination.records import RescaleResult, decode  # noqa: E402

from e2e.emulated import EmulatedCluster  # noqa: E402
from e2e.executor_pods import executors_are  # noqa: E402
from e2e.kubectl import Kubectl  # noqa: E402
from e2e.word_count_job import WordCountJob  # noqa: E402


async def _timed(job: WordCountJob, act: Awaitable[None], launch: int, replicas: int | None = None) -> float:
    job.words.append()
    started = time.monotonic()
    await act
    await job.running(launch, replicas)
    await job.output_is_exact()
    return time.monotonic() - started


async def _driver_uid(kubectl: Kubectl, job: WordCountJob) -> str:
    pod = await kubectl.pod(job.driver_pod(1))
    assert pod is not None, "the driver pod of launch 1 is there"
    return str(pod["metadata"]["uid"])


async def _latest_rescale(job: WordCountJob) -> RescaleResult:
    """The driver's answer to the latest rescale it carried out."""
    async with Etcd(job.platform.etcd) as etcd:
        results = [
            decode(RescaleResult, v) for _, v in await etcd.get_prefix(job.keys.root + b"rescales/results/")
        ]
    return max((r for r in results if r.status == "rescaled"), key=lambda r: r.relaunched_ms or 0)


async def _scaled_in_place(
    job: WordCountJob, kubectl: Kubectl, replicas: int, generation: int, executor_pods: bool
) -> dict[str, float]:
    """`kubectl scale` to `replicas`, carried out by driver 1: the times of its steps."""
    uid = await _driver_uid(kubectl, job)
    job.words.append()
    started, requested_ms = time.monotonic(), time.time_ns() // 1_000_000
    await kubectl.scale(job.name, replicas)
    await job.wait_for(
        lambda s: (
            s.get("replicas") == replicas
            and s.get("observedGeneration") == generation
            and s.get("launch") == 1
        ),
        f"Running at {replicas} by driver 1, generation {generation}",
    )
    times = {"Running at new replicas": time.monotonic() - started}
    if executor_pods:
        await executors_are(kubectl, job, launch=1, count=replicas)
        times["executor pods follow"] = time.monotonic() - started
    await job.output_is_exact()
    times["output exact"] = time.monotonic() - started
    assert await _driver_uid(kubectl, job) == uid, "the same driver pod carried the scale out"
    rescale = await _latest_rescale(job)
    assert rescale.stopped_ms is not None
    assert rescale.relaunched_ms is not None
    # Wall-clock times of this machine's processes: the driver pod runs here.
    times["driver: request → old tasks told to stop (executors reserved, job running)"] = (
        rescale.stopped_ms - requested_ms
    ) / 1000
    times["driver: stop → new tasks started"] = (rescale.relaunched_ms - rescale.stopped_ms) / 1000
    return {f"kubectl scale {_previous(replicas)} → {replicas}: {step}": t for step, t in times.items()}


def _previous(replicas: int) -> int:
    return {4: 2, 1: 4}[replicas]


async def one_round(
    cluster: EmulatedCluster, round_number: int, all_actions: bool, executor_pods: bool
) -> dict[str, float]:
    kubectl = Kubectl(cluster.api, cluster.namespace)
    job = WordCountJob(cluster, kubectl, f"bench-{round_number}")
    times = {"apply → Running at 2": await _timed(job, job.apply(), launch=1, replicas=2)}
    if executor_pods:
        await executors_are(kubectl, job, launch=1, count=2)
    times |= await _scaled_in_place(job, kubectl, 4, 2, executor_pods)
    times |= await _scaled_in_place(job, kubectl, 1, 3, executor_pods)
    if not all_actions:
        await kubectl.delete(job.name)
        return times
    times["driver killed → Running"] = await _timed(job, cluster.kill_driver(job.driver_pod(1)), launch=2)
    started = time.monotonic()
    await kubectl.patch(job.name, {"state": "suspended"})
    await job.wait_for(lambda s: s.get("phase") == "Suspended", "Suspended")
    times["suspend → Suspended"] = time.monotonic() - started
    times["resume → Running"] = await _timed(job, kubectl.patch(job.name, {"state": "running"}), launch=3)
    await kubectl.delete(job.name)
    return times


STATE_KEYS = 8000


@dataclass
class StateJob(WordCountJob):
    """`bench/state_job.py` as a StreamingJob: a steady source, the sink noting arrivals."""

    rate: int = 2000

    @property
    def arrivals(self) -> Path:
        return self.platform.shared / self.name / "arrivals"

    def spec(self, replicas: int = 2) -> dict[str, Any]:
        spec = super().spec(replicas)
        self.arrivals.mkdir(parents=True, exist_ok=True)
        args = {"keys": str(STATE_KEYS), "value_bytes": "100", "output": self.output, "rate": str(self.rate)}
        spec["job"] = {
            "entrypoint": "bench.state_job:build",
            "args": {**args, "arrivals": str(self.arrivals)},
        }
        return spec


async def _flow_of_scale(job: StateJob, kubectl: Kubectl, replicas: int, generation: int) -> dict[str, float]:
    """`kubectl scale` to `replicas`, carried out by driver 1: how records flowed."""
    uid = await _driver_uid(kubectl, job)
    old_launch = max(launches(job.arrivals))
    requested = time.monotonic()
    await kubectl.scale(job.name, replicas)
    while not (
        new := [n for n, s in launches(job.arrivals).items() if n > old_launch and len(s) == replicas]
    ):
        await asyncio.sleep(0.25)  # polling the arrivals
    await job.wait_for(
        lambda s: s.get("replicas") == replicas and s.get("observedGeneration") == generation,
        f"Running at {replicas}, generation {generation}",
    )
    await executors_are(kubectl, job, launch=1, count=replicas)
    await asyncio.sleep(WINDOW_S)  # the flow after the last new subtask's first batch is part of the measure
    assert await _driver_uid(kubectl, job) == uid, "the same driver pod carried the scale out"
    records = flow(arrivals(job.arrivals), requested, old_launch, new[0])
    scale = f"kubectl scale {_previous(replicas)} → {replicas}"
    return {
        f"{scale}: downtime (longest gap at the sink)": records.downtime,
        f"{scale}: first new batch": records.first_new,
        f"{scale}: all new subtasks wrote": records.all_new,
    }


async def sink_downtime_round(cluster: EmulatedCluster, round_number: int) -> dict[str, float]:
    kubectl = Kubectl(cluster.api, cluster.namespace)
    job = StateJob(cluster, kubectl, f"flow-{round_number}")
    await job.apply()
    await job.running(launch=1, replicas=2)
    await executors_are(kubectl, job, launch=1, count=2)
    while not launches(job.arrivals):
        await asyncio.sleep(0.25)  # polling the arrivals
    times = await _flow_of_scale(job, kubectl, 4, 2)
    times |= await _flow_of_scale(job, kubectl, 1, 3)
    await kubectl.patch(job.name, {"state": "suspended"})
    await job.wait_for(lambda s: s.get("phase") == "Suspended", "Suspended")
    output = job.platform.shared / job.name / "out"
    print(
        f"round {round_number}: {check_output(output, STATE_KEYS, set(launches(job.arrivals)))}", flush=True
    )
    await kubectl.delete(job.name)
    return times


async def main(rounds: int, executor_pods: bool, all_actions: bool, sink_downtime: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        server = EtcdServer(workdir / "etcd")
        server.start()
        try:
            etcd = EtcdConfig((server.endpoint,))
            async with EmulatedCluster.running(etcd, workdir, executor_pods=executor_pods) as cluster:
                if sink_downtime:
                    results = [await sink_downtime_round(cluster, n) for n in range(rounds)]
                else:
                    results = [await one_round(cluster, n, all_actions, executor_pods) for n in range(rounds)]
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
    parser.add_argument(
        "--only-apply-and-scale", action="store_true", help="time apply, 2 → 4 and 4 → 1 only"
    )
    parser.add_argument(
        "--sink-downtime", action="store_true", help="scale a steady job, time the sink's gap"
    )
    arguments = parser.parse_args()
    asyncio.run(
        main(
            arguments.rounds,
            arguments.executor_pods,
            not arguments.only_apply_and_scale,
            arguments.sink_downtime,
        )
    )
