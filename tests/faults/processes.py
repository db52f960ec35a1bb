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

from lockgate.runtime.driver.submit import driver_file

from tests.process_tree import descendants, executor_jvms, python_task_workers, python_workers

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
        return sorted(python_workers(self.root))

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


ProcessId = tuple[int, int]
"""(pid, start time in clock ticks since boot): a pid once its process is gone may
name another's process; with its start time it names only the one seen."""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state is the first)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def identify(pid: int) -> ProcessId | None:
    fields = _stat(pid)
    return None if fields is None else (pid, int(fields[19]))


def alive(process: ProcessId) -> bool:
    """The same process still runs (not a zombie, not a new one under its pid)."""
    fields = _stat(process[0])
    return fields is not None and fields[0] != "Z" and int(fields[19]) == process[1]


def kill(pid: int) -> bool:
    return send(pid, signal.SIGKILL)


def pause(pid: int) -> bool:
    return send(pid, signal.SIGSTOP)


def resume(pid: int) -> bool:
    return send(pid, signal.SIGCONT)
