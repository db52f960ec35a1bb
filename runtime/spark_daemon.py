"""Spark's Python daemon (`spark.python.daemon.module`), with pyspark imported from
its installed package instead of `pyspark.zip`.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on its Python workers'
path. A zip import compiles every module from source each time — nothing is
cached — so each daemon spent about half a second compiling pyspark before the
first task of a session (or of an executor) could run (docs/benchmarks.md).
When that zip is the one inside the installed pyspark package (pip's layout,
and the image's), the package is the same code, compiled once: the zips go
last on the path. A zip of another Spark installation (a `SPARK_HOME` of its
own) stays first: its Python must match its JVM.

This module sits beside `lockgate.runtime.spark`, not in it: that package
imports pyspark, which must not happen before the path is set.
"""

from __future__ import annotations

import logging
import os
import sys


def _sparks_zip(entry: str) -> bool:
    name = os.path.basename(entry)
    return name.endswith(".zip") and name.startswith(("pyspark", "py4j"))


def installed_first(path: list[str]) -> list[str]:
    """`path` with Spark's zips (pyspark's, py4j's) after the directories, when each
    lies inside the pyspark package that would then be imported: the first one on
    the path. Another pyspark first (a Spark distribution's `python/`, a user's
    site-packages) leaves the path as it is."""
    zips = [entry for entry in path if _sparks_zip(entry)]
    rest = [entry for entry in path if entry not in zips]
    first = next((entry for entry in rest if os.path.isdir(os.path.join(entry, "pyspark"))), None)
    if not zips or first is None:
        return path
    package = os.path.join(os.path.realpath(first), "pyspark") + os.sep
    if not all(os.path.realpath(z).startswith(package) for z in zips):
        return path
    return rest + zips


if __name__ == "__main__":
    # The tasks' logging, at the level of the command that started Spark (cli/verbosity.py).
    level = os.environ.get("LOCKGATE_LOG_LEVEL", "WARNING")
    level = level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "WARNING"
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    sys.path[:] = installed_first(sys.path)
    from pyspark.daemon import manager  # only once the path is set

    manager()
