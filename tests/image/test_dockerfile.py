"""What can be checked of the image without a Docker engine: the Dockerfile
parses, what it copies and runs exists, it runs as a non-root user, and its
layers put the dependencies before the code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(REPO / "Dockerfile"))


def _instructions(dockerfile: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in dockerfile.structure if i["instruction"] == name]


def test_the_image_runs_as_a_non_root_user_it_creates(dockerfile: DockerfileParser) -> None:
    user = _instructions(dockerfile, "USER")[-1]
    uid = user.split(":")[0]
    assert uid.isdigit(), "numeric, so the kubelet can verify runAsNonRoot"
    assert int(uid) != 0
    assert any(f"--uid {uid}" in run for run in _instructions(dockerfile, "RUN")), "the user is created"
    last_user = max(i["startline"] for i in dockerfile.structure if i["instruction"] == "USER")
    later = [i for i in dockerfile.structure if i["startline"] > last_user and i["instruction"] == "RUN"]
    assert later == [], "nothing runs as root after the switch"


def test_everything_copied_exists_and_is_not_ignored(dockerfile: DockerfileParser) -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    for value in _instructions(dockerfile, "COPY"):
        *sources, _ = value.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: missing"
            assert source.split("/")[0] not in ignored, f"COPY {source}: excluded by .dockerignore"


def test_dependencies_are_installed_before_the_code_is_copied(dockerfile: DockerfileParser) -> None:
    steps = [
        (i["instruction"], i["value"]) for i in dockerfile.structure if i["instruction"] in ("COPY", "RUN")
    ]
    first_code = next(n for n, (kind, value) in enumerate(steps) if kind == "COPY" and "runtime" in value)
    dependencies = next(n for n, (kind, value) in enumerate(steps) if "requirements.txt" in value)
    assert dependencies < first_code
    assert steps[dependencies - 1] == ("COPY", "pyproject.toml ./"), "only pyproject.toml before them"
    assert "'dependencies'" in steps[dependencies][1], "the dependency list comes from pyproject.toml"


def test_the_image_installs_the_object_store_extras(dockerfile: DockerfileParser) -> None:
    (step,) = [value for value in _instructions(dockerfile, "RUN") if "requirements.txt" in value]
    listing = re.search(r'python -c "(.*?)"', step, re.DOTALL)
    assert listing is not None, step
    printed = subprocess.run(
        [sys.executable, "-c", listing[1].replace("\\\n", "")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"s3fs>=2024.2", "gcsfs>=2024.2", "pyspark>=3.5"} <= set(printed), printed


def test_the_entrypoint_and_commands_it_names_exist(dockerfile: DockerfileParser) -> None:
    entrypoint = json.loads(_instructions(dockerfile, "ENTRYPOINT")[-1])
    assert entrypoint[-1] == "/opt/lockgate/entrypoint.sh"
    copied = {v.split()[-1]: v.split()[0] for v in _instructions(dockerfile, "COPY")}
    script = REPO / copied[entrypoint[-1]]
    assert os.access(script, os.X_OK), f"{script} must be executable"
    assert "tini" in entrypoint[0], "an init reaps Spark's child processes and forwards signals"
    assert any("tini" in run for run in _instructions(dockerfile, "RUN"))
    command = json.loads(_instructions(dockerfile, "CMD")[-1])
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts, "CMD runs the installed console script"


def test_spark_home_is_where_the_venv_installs_pyspark(dockerfile: DockerfileParser) -> None:
    version = re.match(r"python:(\d+\.\d+)", dockerfile.baseimage)
    assert version is not None, f"the base image {dockerfile.baseimage} pins a Python version"
    assert tuple(int(p) for p in version[1].split(".")) >= (3, 11)
    env = dockerfile.envs
    assert env["SPARK_HOME"] == f"{env['VIRTUAL_ENV']}/lib/python{version[1]}/site-packages/pyspark"
    assert env["PYSPARK_PYTHON"] == f"{env['VIRTUAL_ENV']}/bin/python"
    assert any("openjdk-17" in run for run in _instructions(dockerfile, "RUN")), "Spark 4 needs Java 17"
