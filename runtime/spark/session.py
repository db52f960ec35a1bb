"""Spark sessions for local runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession


def local_session(
    slots: int, app_name: str = "lockgate", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A `local[slots]` session. A barrier stage needs all P slots at once, so
    `slots` must be at least the parallelism (more slots than cores is fine:
    Lockgate's tasks are long-running threads, not CPU-bound batch tasks)."""
    # Python workers run this interpreter, with the driver's import path, so
    # that job modules importable here are importable in the tasks.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    builder = (
        SparkSession.builder.master(f"local[{slots}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.faulthandler.enabled", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
