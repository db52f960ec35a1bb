"""The Java check before `lockgate run` starts anything: none, or one too old for
Spark, is named with what to install."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from lockgate.runtime.spark.java import JavaError, check_java, minimum_java

LOCKGATE = str(Path(sys.executable).parent / "lockgate")


def _jdk(root: Path, release: str | None, says: str = "") -> Path:
    """A JDK directory whose java prints `says` to stderr and exits 0."""
    (root / "bin").mkdir(parents=True)
    java = root / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{says}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    if release is not None:
        (root / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{release}"\n')
    return root


def test_the_java_spark_runs_here_is_new_enough() -> None:
    assert check_java().name == "java"


@pytest.mark.parametrize(
    ("release", "says", "complaint"),
    [
        ("11.0.2", "", "is Java 11.0.2: install Java 17 or newer"),
        (None, 'openjdk version "1.8.0_292"', "is Java 1.8.0_292: install Java 17 or newer"),
        (None, "nothing useful", "does not say which Java it is"),
    ],
)
def test_an_old_or_unknown_java_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str | None, says: str, complaint: str
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_jdk(tmp_path / "jdk", release, says)))
    with pytest.raises(JavaError, match=complaint):
        check_java()


def test_no_java_at_all_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaError, match="there is no java on PATH and JAVA_HOME is not set"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaError, match=f"JAVA_HOME={tmp_path}/nowhere has no bin/java"):
        check_java()


def test_lockgate_run_with_an_old_java_stops_before_anything_starts(tmp_path: Path) -> None:
    env = {**os.environ, "JAVA_HOME": str(_jdk(tmp_path / "jdk", "11.0.2"))}
    result = subprocess.run(
        [LOCKGATE, "run", "tests.jobs.configurable:running_sum", "--arg", f"output=file://{tmp_path}/out"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"lockgate run: Spark needs Java 17 or newer; {tmp_path}/jdk/bin/java is Java 11.0.2: install Java 17 "
        "or newer (Debian: apt install openjdk-17-jre-headless), or point JAVA_HOME at it"
    ]
    assert not (tmp_path / ".lockgate" / "etcd").exists(), "nothing was started"


def test_the_minimum_is_what_the_installed_spark_runs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert minimum_java() == (17 if int(version("pyspark").split(".")[0]) >= 4 else 8)
    monkeypatch.setenv("JAVA_HOME", str(_jdk(tmp_path / "jdk", "11.0.2")))
    assert check_java(minimum=8).name == "java", "a Spark 3 runs on Java 11"
