"""The Java that Spark's launcher will run, and whether it is new enough, checked
before anything starts: without it a run would fail only once the JVM does, with
Spark's launcher's message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path


def minimum_java() -> int:
    """What the installed pyspark's Spark runs on: Java 17 for Spark 4, 8 before."""
    spark_major = int(version("pyspark").split(".")[0])
    return 17 if spark_major >= 4 else 8


class JavaError(RuntimeError):
    """No Java, or one too old for Spark; the message says what to install."""


def spark_java() -> Path | None:
    """The java Spark's launcher will run (JAVA_HOME first, as spark-class does)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def check_java(minimum: int | None = None) -> Path:
    minimum = minimum or minimum_java()
    java = spark_java()
    hint = f"install Java {minimum} or newer (Debian: apt install openjdk-{minimum}-jre-headless)"
    if java is None:
        where = (
            f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java"
            if os.environ.get("JAVA_HOME")
            else ("there is no java on PATH and JAVA_HOME is not set")
        )
        raise JavaError(f"Spark needs Java {minimum} or newer, and {where}: {hint}, or set JAVA_HOME")
    version = _version(java)
    if version is None:
        raise JavaError(f"{java} does not say which Java it is (java -version): {hint}, or set JAVA_HOME")
    if _major(version) < minimum:
        raise JavaError(
            f"Spark needs Java {minimum} or newer; {java} is Java {version}: {hint}, or point JAVA_HOME at it"
        )
    return java


def _version(java: Path) -> str | None:
    """From the JDK's `release` file (no JVM started), else from `java -version`."""
    release = java.parent.parent / "release"
    if release.is_file():
        found = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"), re.MULTILINE)
        if found:
            return found[1]
    try:
        said = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "([^"]+)"', said)
    return found[1] if found else None


def _major(version: str) -> int:
    """17 of "17.0.15", 8 of "1.8.0_292"."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return 0
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])
