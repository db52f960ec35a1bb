"""What can be checked of the image without a Docker engine: the Dockerfile
parses, what it copies and runs exists, it runs as a non-root user, and its
layers put the dependencies before the code."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

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


def test_dependencies_are_installed_from_the_lock_before_the_code_is_copied(
    dockerfile: DockerfileParser,
) -> None:
    steps = [
        (i["instruction"], i["value"]) for i in dockerfile.structure if i["instruction"] in ("COPY", "RUN")
    ]
    first_code = next(n for n, (kind, value) in enumerate(steps) if kind == "COPY" and "runtime" in value)
    dependencies = next(
        n for n, (kind, value) in enumerate(steps) if "requirements.lock" in value and kind == "RUN"
    )
    assert dependencies < first_code
    assert steps[dependencies - 1] == ("COPY", "requirements.lock ./"), "only the lock before them"
    install = steps[dependencies][1]
    assert "--require-hashes" in install, "a file whose hash differs from the lock's is refused"
    assert "--no-deps" in install, "nothing beyond the lock"


def _pins() -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, hashes) of every package in requirements.lock."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    text = (REPO / "requirements.lock").read_text()
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if match is not None:
            pins[canonicalize_name(match[1])] = (
                Version(match[2]),
                re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
            )
    return pins


def test_the_lock_pins_every_package_the_image_needs_with_its_hashes() -> None:
    """What pyproject.toml asks for (and the operator, s3, gcs and kafka extras the image has) is
    what requirements.lock pins: change one, run scripts/lock.sh."""
    pins = _pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["s3"]]
    for extra in ("operator", "gcs", "kafka"):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements.lock: run scripts/lock.sh"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name} {version}, outside {requirement}: run scripts/lock.sh"
        )
    for name, (_, hashes) in pins.items():
        assert hashes, f"{name} has no --hash in requirements.lock"
    assert {"pyspark", "s3fs", "gcsfs", "kopf", "rocksdict", "confluent-kafka"} <= set(pins)


def test_the_development_environment_holds_to_the_locks_versions() -> None:
    install = (REPO / "scripts" / "install.sh").read_text()
    assert "requirements.lock" in install
    assert "--constraint .cache/constraints.txt" in install


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
