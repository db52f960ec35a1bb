"""SIGKILL and SIGSTOP/SIGCONT of the processes of a job submitted to Spark
`local-cluster`: the Python driver, the executor JVMs, the Python task workers.

`spark-submit` becomes the driver's JVM (the process the harness started); the
Python driver, and the executor JVMs (local-cluster's worker runs inside the
driver's JVM) are its children; each executor's pyspark daemon forks the task
workers."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lockgate.runtime.spark.submit import driver_file

from examples.chaos import descendants, executor_jvms, python_task_workers

Target = Literal["worker", "executor", "driver"]


@dataclass(frozen=True)
class SparkProcesses:
    """The processes under one submitted driver; `root` is spark-submit's pid."""

    root: int

    def driver(self) -> int | None:
        mark = f" {driver_file()} "  # spark-submit runs the driver's file with Python
        return next((pid for pid, (_, cmd) in descendants(self.root).items() if mark in cmd), None)

    def task_workers(self) -> list[int]:
        return sorted(python_task_workers(self.root))

    def python_workers(self) -> list[int]:
        """Every Python worker forked by a pyspark daemon, running a task or idle."""
        tree = descendants(self.root)
        return sorted(
            pid
            for pid, (ppid, cmd) in tree.items()
            if "pyspark.daemon" in cmd and ppid in tree and "pyspark.daemon" in tree[ppid][1]
        )

    def executors(self) -> list[int]:
        return sorted(executor_jvms(self.root))

    def all(self) -> list[int]:
        return sorted(descendants(self.root))

    def of(self, target: Target) -> list[int]:
        finders: dict[Target, Callable[[], list[int]]] = {
            "worker": self.task_workers,
            "executor": self.executors,
            "driver": lambda: [pid for pid in [self.driver()] if pid is not None],
        }
        return finders[target]()


def send(pid: int, sig: signal.Signals) -> bool:
    """False when the process is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill(pid: int) -> bool:
    return send(pid, signal.SIGKILL)


def pause(pid: int) -> bool:
    return send(pid, signal.SIGSTOP)


def resume(pid: int) -> bool:
    return send(pid, signal.SIGCONT)
