"""Spark sessions set up for Lockgate's long-running barrier stages."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from pyspark import SparkContext
from pyspark.sql import SparkSession

LOCKGATE_CONF = {
    # A failed task must fail the stage at once: the job master relaunches it
    # from the latest checkpoint. A Spark-side retry would relaunch it from the
    # restore point of the failed launch and replay what was already committed.
    "spark.task.maxFailures": "1",
    "spark.stage.maxConsecutiveAttempts": "1",
    # After an executor is lost, wait for replacements (up to a minute) before
    # launching a barrier stage that needs all of its slots.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "60",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.faulthandler.enabled": "true",
}


def spark_session(
    master: str | None = None, app_name: str = "lockgate", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A session with Lockgate's settings; `master` None keeps spark-submit's."""
    # Python workers run this interpreter, with the driver's import path, so
    # that job modules importable here are importable in the tasks.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in {**LOCKGATE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# A local driver's JVM only schedules: records flow between the Python workers, never
# through it. So its JIT's peak speed does not matter and its start does: C1 alone and
# the serial collector start the session about 0.6 s sooner (docs/benchmarks.md).
QUICK_START_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def local_session(
    slots: int, app_name: str = "lockgate", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A `local[slots]` session. A barrier stage needs all P slots at once, so
    `slots` must be at least the parallelism (more slots than cores is fine:
    Lockgate's tasks are long-running threads, not CPU-bound batch tasks)."""
    settings = {"spark.ui.enabled": "false", **QUICK_START_JVM, **(conf or {})}
    return spark_session(f"local[{slots}]", app_name, settings)


def stop_with_jvm(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop `spark` and the driver JVM this process launched for it, and wait for
    that JVM to exit: otherwise it exits only after this process does (it watches
    its stdin), and a command that has returned may leave it running for a while.
    A JVM that has not exited after `timeout_s` is killed."""
    spark.stop()
    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if gateway is None or process is None:  # a driver under spark-submit: the JVM is our parent
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    gateway.shutdown()
    if process.stdin is not None:
        process.stdin.close()  # the JVM's signal to exit
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
