"""Spark's Python workers import pyspark compiled, from its installed package,
not from the source zip Spark puts first on their path (start-up: about half a
second per session and per executor, docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lockgate.runtime.spark_daemon import installed_first

SITE = "/venv/lib/python3.11/site-packages"
ZIPS = [f"{SITE}/pyspark/python/lib/pyspark.zip", f"{SITE}/pyspark/python/lib/py4j-0.10.9.9-src.zip"]


def _site_packages(tmp_path: Path) -> str:
    site = tmp_path / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    return str(site)


def test_the_zips_inside_the_installed_package_go_after_it(tmp_path: Path) -> None:
    site = _site_packages(tmp_path)
    zips = [z.replace(SITE, site) for z in ZIPS]
    stdlib_zip = "/usr/lib/python311.zip"  # on every path; not Spark's, and left where it is
    path = ["", *zips, "/job", stdlib_zip, site]
    assert installed_first(path) == ["", "/job", stdlib_zip, site, *zips]


def test_the_zip_of_another_spark_installation_stays_first(tmp_path: Path) -> None:
    """Its Python must match its JVM: an installed pyspark of another version would not."""
    site = _site_packages(tmp_path)
    spark_home = ["/opt/spark/python/lib/pyspark.zip", "/opt/spark/python/lib/py4j-0.10.9.9-src.zip"]
    path = [*spark_home, site]
    assert installed_first(path) == path


def test_without_an_installed_package_nothing_moves(tmp_path: Path) -> None:
    path = [*ZIPS, str(tmp_path)]
    assert installed_first(path) == path


def test_a_task_imports_the_installed_pyspark(spark: Any) -> None:
    """Failed before: every worker's pyspark came from `pyspark.zip`."""

    def origin(_: object) -> str:
        import pyspark  # noqa: PLC0415 — in the worker, as a task imports it

        return str(pyspark.__file__)

    (where,) = spark.sparkContext.parallelize([0], 1).map(origin).collect()
    assert "pyspark.zip" not in where, where


def test_another_pyspark_ahead_of_the_installed_one_leaves_the_path_alone(tmp_path: Path) -> None:
    """From a review: with a Spark distribution's `python/` first on the path
    (PYTHONPATH=$SPARK_HOME/python), moving the zips would import that pyspark,
    whatever its version, against this JVM."""
    site = _site_packages(tmp_path)
    distribution = tmp_path / "spark-3.5" / "python"
    (distribution / "pyspark").mkdir(parents=True)
    zips = [z.replace(SITE, site) for z in ZIPS]
    path = [*zips, str(distribution), site]
    assert installed_first(path) == path
