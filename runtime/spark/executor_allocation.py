"""The executors a parallelism needs, asked of Spark before a rescale stops the old
stage ("make before break") and given back after the new one runs.

A barrier stage of P tasks starts only once all P task slots exist at once, and
Spark's executors are what hold them. For a scale-up the job master reserves the
new parallelism's executors while the old stage still runs on its own, so the new
executors' start (on Kubernetes: pods, each a JVM) is not part of the downtime;
after a scale-down's new stage runs, the executors it does not need are released.

Spark is asked through its developer API (`SparkContext.requestTotalExecutors`,
the scheduler backend's `killExecutors`), which every cluster scheduler backend
answers (Kubernetes, standalone); a `local[N]` master runs tasks as threads of the
driver's JVM, so there is nothing to ask for, only N slots to fit in.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often a reservation looks at the registered executors


class ExecutorReservationError(RuntimeError):
    """Spark did not give the executors a parallelism needs within the bound."""

    def __init__(self, message: str, *, asked: int, registered: int, bound_s: float) -> None:
        super().__init__(message)
        self.asked = asked
        self.registered = registered
        self.bound_s = bound_s


def executors_for(parallelism: int, slots_per_executor: int) -> int:
    """A barrier stage runs all its tasks at once: one slot per task."""
    if parallelism < 1:
        raise ValueError(f"parallelism {parallelism}: a stage has at least one task")
    return math.ceil(parallelism / slots_per_executor)


def _is_local(master: str) -> bool:
    # local-cluster[...] starts executors in JVMs of their own: a cluster to ask.
    return master == "local" or master.startswith("local[")


class ExecutorAllocation:
    """The executors of `spark`'s application, for a stage's parallelism."""

    def __init__(self, spark: SparkSession, poll_s: float = POLL_S) -> None:
        self._context = spark.sparkContext
        self._poll_s = poll_s

    @property
    def _jvm_context(self) -> Any:
        return self._context._jsc.sc()

    @property
    def master(self) -> str:
        return str(self._context.master)

    @property
    def local(self) -> bool:
        return _is_local(self.master)

    @property
    def slots_per_executor(self) -> int:
        conf = self._context.getConf()
        cores = int(conf.get("spark.executor.cores", "1") or "1")
        task_cpus = int(conf.get("spark.task.cpus", "1") or "1")
        if task_cpus > cores:
            raise ExecutorReservationError(
                f"spark.task.cpus={task_cpus} is more than spark.executor.cores={cores}: no executor "
                "can run a task; set spark.task.cpus to at most spark.executor.cores",
                asked=0,
                registered=0,
                bound_s=0.0,
            )
        return cores // task_cpus

    def executors_needed(self, parallelism: int) -> int:
        """How many executors a stage of `parallelism` tasks needs (local: none)."""
        return 0 if self.local else executors_for(parallelism, self.slots_per_executor)

    def slots(self) -> int:
        """Task slots on the executors registered now: what a barrier stage may use."""
        profile = self._jvm_context.resourceProfileManager().defaultResourceProfile()
        return int(self._jvm_context.maxNumConcurrentTasks(profile))

    def registered(self) -> list[str]:
        """The ids of the executors registered now and not being removed."""
        backend = self._jvm_context.schedulerBackend()
        ids = self._jvm_context.getExecutorIds()
        return [str(ids.apply(i)) for i in range(ids.size()) if backend.isExecutorActive(ids.apply(i))]

    def reserve(self, parallelism: int, timeout_s: float) -> None:
        """Ask Spark for the executors `parallelism` needs in total and wait until
        they registered; the running stage keeps its own meanwhile. Raises
        ExecutorReservationError when they did not come within `timeout_s` (Spark
        is then asked for no more than have registered), or when a local master
        has fewer slots than `parallelism`."""
        if self.local:
            self._refuse_above_local_slots(parallelism)
            return
        self._refuse_dynamic_allocation()
        needed = self.executors_needed(parallelism)
        if self.slots() >= parallelism:
            return  # a scale-down, or the executors are there already: nothing to ask
        before = len(self.registered())
        if not self._jvm_context.requestTotalExecutors(needed, 0, self._scala_map()):
            raise ExecutorReservationError(
                f"Spark master {self.master} cannot be asked for executors (its scheduler backend has no "
                f"executor allocation); parallelism {parallelism} needs {needed}",
                asked=needed,
                registered=len(self.registered()),
                bound_s=timeout_s,
            )
        log.info("asked Spark for %d executor(s) in total, for parallelism %d", needed, parallelism)
        deadline = time.monotonic() + timeout_s
        while self.slots() < parallelism:
            if time.monotonic() >= deadline:
                came = len(self.registered())
                # Refused: the stage that runs goes on as it was, asking for no more executors.
                self._jvm_context.requestTotalExecutors(max(before, came), 0, self._scala_map())
                raise ExecutorReservationError(
                    f"asked Spark for {needed} executor(s) for parallelism {parallelism} "
                    f"({self.slots_per_executor} task slot(s) each); {came} registered within the "
                    f"{timeout_s:g} s bound: check that the cluster has room for the executors (on "
                    "Kubernetes: the executor pods' events and the namespace's quota), or raise the bound",
                    asked=needed,
                    registered=came,
                    bound_s=timeout_s,
                )
            time.sleep(self._poll_s)

    def release_surplus(self, parallelism: int) -> list[str]:
        """Give back the executors beyond what `parallelism` needs, idle ones only
        (an executor running a task is never killed): the ids Spark kills. Spark
        asks no replacement for them."""
        if self.local:
            return []
        self._refuse_dynamic_allocation()
        needed = self.executors_needed(parallelism)
        registered = self.registered()
        surplus = len(registered) - needed
        if surplus <= 0:
            return []
        scheduler = self._jvm_context.taskScheduler()
        idle = [executor for executor in registered if not scheduler.isExecutorBusy(executor)][:surplus]
        # force=False: Spark itself skips an executor that got a task since it was picked.
        killed = self._jvm_context.schedulerBackend().killExecutors(self._scala_seq(idle), True, False, False)
        released = [str(killed.apply(i)) for i in range(killed.size())]
        if len(released) < surplus:
            log.warning(
                "parallelism %d needs %d executor(s) of %d; %d were idle to release (%s)",
                parallelism,
                needed,
                len(registered),
                len(released),
                ", ".join(released) or "none",
            )
        # Pending executors beyond the need are not asked for any more either.
        self._jvm_context.requestTotalExecutors(
            max(needed, len(registered) - len(released)), 0, self._scala_map()
        )
        return released

    def _refuse_above_local_slots(self, parallelism: int) -> None:
        slots = self.slots()
        if parallelism > slots:
            raise ExecutorReservationError(
                f"parallelism {parallelism} needs {parallelism} task slots at once; Spark master "
                f"{self.master} has {slots} (threads of the driver): start the job with a local master "
                f"of at least local[{parallelism}]",
                asked=parallelism,
                registered=slots,
                bound_s=0.0,
            )

    def _refuse_dynamic_allocation(self) -> None:
        if self._jvm_context.executorAllocationManager().isDefined():
            raise ExecutorReservationError(
                "spark.dynamicAllocation.enabled is true: Spark's allocation manager sets the executors "
                "itself and would undo a reservation; set spark.dynamicAllocation.enabled=false",
                asked=0,
                registered=len(self.registered()),
                bound_s=0.0,
            )

    def _scala_map(self) -> Any:
        jvm = self._context._jvm
        return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())  # type: ignore[union-attr]

    def _scala_seq(self, items: list[str]) -> Any:
        jvm = self._context._jvm
        java_list = jvm.java.util.ArrayList()  # type: ignore[union-attr]
        for item in items:
            java_list.add(item)
        return jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)  # type: ignore[union-attr]
