"""A Spark driver with the Kubernetes backend that plays a rescale's executor steps
against the emulated cluster, for e2e/test_executor_reservation.py:

1. a barrier stage of 1 task runs on the one executor pod, ticking into a file;
2. while it runs, `BarrierStage.reserve(2, bound)` asks Spark for a second
   executor and waits until it registered; then the old stage is stopped;
3. a barrier stage of 2 tasks runs (both slots exist);
4. `BarrierStage.release_surplus(1)` gives the idle surplus executor back;
5. once the test writes the file `finish`, a reservation for 3 within no time
   is refused, and the driver stops.

Each step is one JSON line on stdout. Run as
`python -m e2e.reserving_driver API_URL NAMESPACE POD_PREFIX WORKDIR`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lockgate.runtime.spark import BarrierStage, spark_session
from lockgate.runtime.spark.executor_allocation import ExecutorAllocation, ExecutorReservationError
from pyspark import BarrierTaskContext

RESERVE_BOUND_S = 120.0
TICK_S = 0.1


def say(step: str, **fields: object) -> None:
    print(json.dumps({"step": step, "at": time.time(), **fields}), flush=True)


def _tick_until_stopped(workdir: str, _rows: Iterator[int]) -> Iterator[int]:
    BarrierTaskContext.get()  # a barrier task, as a job's
    ticks, stop = Path(workdir) / "ticks", Path(workdir) / "stop"
    count = 0
    while not stop.exists():
        count += 1
        partial = ticks.with_suffix(".partial")
        partial.write_text(str(count))
        partial.replace(ticks)  # read whole, never half-written
        time.sleep(TICK_S)
    return iter([count])


def _executor_of_task(_rows: Iterator[int]) -> Iterator[str]:
    context = BarrierTaskContext.get()
    context.barrier()  # every task of the stage runs at once
    return iter([context.getTaskInfos()[context.partitionId()].address])


def main(api_url: str, namespace: str, prefix: str, workdir: str) -> None:
    spark = spark_session(
        f"k8s://{api_url}",
        "lockgate-reservation",
        {
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.container.image": "lockgate:e2e",  # the pod runner runs this checkout
            "spark.kubernetes.executor.podNamePrefix": prefix,
            "spark.executor.instances": "1",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.dynamicAllocation.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
        },
    )
    context = spark.sparkContext
    context.setLogLevel("ERROR")
    stage, allocation = BarrierStage(spark), ExecutorAllocation(spark)
    # The first stage waits for its executor the way a launch does (Spark's barrier check).
    old_stage = threading.Thread(
        target=lambda: (
            context.parallelize([0], 1)
            .barrier()
            .mapPartitions(lambda rows: _tick_until_stopped(workdir, rows))
            .collect()
        ),
        daemon=True,
    )
    old_stage.start()
    ticks = Path(workdir) / "ticks"
    while not ticks.exists():
        time.sleep(TICK_S)
    say("old stage runs", executors=allocation.registered())

    say("reserving", parallelism=2)
    stage.reserve(2, RESERVE_BOUND_S)
    say("reserved", executors=allocation.registered(), old_stage_running=old_stage.is_alive())

    (Path(workdir) / "stop").touch()
    old_stage.join()
    addresses = context.parallelize([0, 1], 2).barrier().mapPartitions(_executor_of_task).collect()
    say("new stage ran", addresses=addresses)

    stage.release_surplus(1)
    say("released", registered=allocation.registered())
    # Not before the test saw the surplus pod go: the refusal below asks for pods, stopping deletes all.
    finish, deadline = Path(workdir) / "finish", time.monotonic() + RESERVE_BOUND_S
    while not finish.exists() and time.monotonic() < deadline:
        time.sleep(TICK_S)
    try:
        stage.reserve(3, 0.0)  # no executor JVM registers in no time
    except ExecutorReservationError as refused:
        say("refused", message=str(refused), asked=refused.asked, registered=refused.registered)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
