"""A job launch as one Spark barrier stage of P long-running tasks.

All P tasks start together (barrier mode), learn each other's exchange
addresses through the job's etcd (`CheckpointControl.gather_addresses`), and
run until the job ends. If
one fails, Spark fails the whole stage; cancelling the job group interrupts
every task.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from collections.abc import Iterator

from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.control_plane import open_control_plane, shared_across_processes
from lockgate.runtime.engine.job_failure import found_in
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.remote_task import run_task
from lockgate.runtime.spark.executor_allocation import ExecutorAllocation
from py4j.protocol import Py4JJavaError
from pyspark import BarrierTaskContext
from pyspark.sql import SparkSession

BIND_HOST_ENV = "LOCKGATE_EXCHANGE_BIND"
ADVERTISE_HOST_ENV = "LOCKGATE_EXCHANGE_HOST"
# How long the driver waits for etcd when it looks for a failure a task recorded.
RECORDED_FAILURE_READ_S = 10.0

log = logging.getLogger(__name__)


def _run_partition(spec: JobSpec, _rows: Iterator[int]) -> Iterator[int]:
    context = BarrierTaskContext.get()
    index = context.partitionId()
    # The executor's address as Spark knows it, unless the pod says otherwise.
    spark_host = context.getTaskInfos()[index].address.rpartition(":")[0]
    advertise = os.environ.get(ADVERTISE_HOST_ENV, spark_host)
    bind = os.environ.get(BIND_HOST_ENV, "0.0.0.0")
    run_task(spec, index, bind_host=bind, advertise_host=advertise)
    return iter([index])


def recorded_failure(spec: JobSpec) -> str:
    """The failure a task of this launch blamed on the job's code or input
    (`CheckpointControl.record_failure`), or "": Spark names the stage's first
    failed task, which may be a peer whose exchange broke when that task died."""

    async def read() -> bytes | None:
        store = open_control_plane(spec.control_plane)
        await within(store.connect(), RECORDED_FAILURE_READ_S)
        try:
            return await within(store.get(spec.keys.failure_of(spec.launch)), RECORDED_FAILURE_READ_S)
        finally:
            await store.close()

    try:
        recorded = asyncio.run(read())
    except Exception as error:  # noqa: BLE001 - Spark's own error is raised then
        log.warning("could not read the failure recorded by this launch's tasks: %s", error)
        return ""
    return "" if recorded is None else recorded.decode(errors="replace")


class BarrierStage:
    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._group: str | None = None
        self._executors = ExecutorAllocation(spark)

    def run(self, spec: JobSpec) -> None:
        if not shared_across_processes(spec.control_plane):
            raise ValueError(
                f"job {spec.keys.job}: Spark runs its tasks in executor processes, which cannot "
                "reach an in-memory control plane; give the job an etcd (--etcd, or a "
                "JobSpec with an EtcdConfig), or run it in-process with ThreadStage"
            )
        if spec.graph_factory is not None:
            raise ValueError(
                f"job {spec.keys.job}: its graph is built by a function of this process, which "
                "Spark's executors cannot call; give the job an entrypoint (module:function)"
            )
        context = self._spark.sparkContext
        group = f"lockgate-{spec.keys.job}-{uuid.uuid4().hex[:8]}"
        self._group = group
        # Job groups are per thread (PySpark pins Python threads to JVM threads).
        context.setJobGroup(group, f"Lockgate job {spec.keys.job}", interruptOnCancel=True)
        rdd = context.parallelize(range(spec.parallelism), spec.parallelism)
        try:
            finished = rdd.barrier().mapPartitions(functools.partial(_run_partition, spec)).collect()
        except Py4JJavaError as error:
            job_failure = found_in(str(error)) or found_in(recorded_failure(spec))
            if job_failure is None:
                raise
            raise job_failure from None  # Py4J's text around it is Spark's and Java's
        if sorted(finished) != list(range(spec.parallelism)):
            raise RuntimeError(f"tasks {sorted(finished)} finished, 0..{spec.parallelism - 1} expected")

    @property
    def stop_wait_s(self) -> None:
        """Spark kills cancelled tasks: wait for it, so a relaunch never overlaps them."""
        return None

    def cancel(self) -> None:
        if self._group is not None:
            self._spark.sparkContext.cancelJobGroup(self._group)

    def reserve(self, parallelism: int, timeout_s: float) -> None:
        """Spark's executors for `parallelism` tasks registered (executor_allocation)."""
        self._executors.reserve(parallelism, timeout_s)

    def release_surplus(self, parallelism: int) -> None:
        self._executors.release_surplus(parallelism)
