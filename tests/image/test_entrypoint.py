"""The image's entrypoint script, run here: Spark's executor pods start it with
`executor`; anything else is run as given."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "entrypoint.sh"


def _executor_env(**changes: str) -> dict[str, str]:
    """What Spark's Kubernetes backend sets on an executor pod, with a driver that is not there."""
    env = {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-application-1",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "sums-1-exec-1",
        "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=1",
        "SPARK_JAVA_OPT_1": "-Dspark.network.timeout=5s",
    }
    env.update(changes)
    return env


def test_executor_mode_starts_sparks_kubernetes_executor_backend() -> None:
    run = subprocess.run(
        [str(ENTRYPOINT), "executor"],
        env=_executor_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode != 0, "no driver to register with"
    # The JVM found the class on the pyspark classpath and went for the driver URL it was given.
    assert "KubernetesExecutorBackend" in run.stderr or "CoarseGrainedExecutorBackend" in run.stderr
    assert "Failed to connect to /127.0.0.1:1" in run.stderr, run.stderr[-3000:]


def test_executor_mode_names_a_missing_variable() -> None:
    env = _executor_env()
    del env["SPARK_DRIVER_URL"]
    run = subprocess.run(
        [str(ENTRYPOINT), "executor"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert run.returncode == 2
    assert "$SPARK_DRIVER_URL is not set" in run.stderr


def test_any_other_command_runs_as_given() -> None:
    run = subprocess.run(
        [str(ENTRYPOINT), "python", "-c", "import sys; print(sys.argv[1:])", "--flag"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert run.stdout.strip() == "['--flag']"
