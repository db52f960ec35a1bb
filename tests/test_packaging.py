"""`pip install lockgate` is what a job's author needs — the runtime, the command
line, `lockgate.testing` — without kopf or the Kubernetes client, which come with
the `operator` extra. Shown by running them where kopf and kubernetes cannot be
imported (a `sitecustomize` that refuses them, in the command and in Spark's
Python workers alike)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from lockgate.runtime import read_committed

from tests.exactness import assert_running_sums_exact

REPO = Path(__file__).resolve().parent.parent
LOCKGATE = str(Path(sys.executable).parent / "lockgate")
REFUSING = """
import sys


class RefuseTheOperatorsPackages:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("kopf", "kubernetes"):
            raise ModuleNotFoundError(f"No module named {name!r} (not installed)", name=name)
        return None


sys.meta_path.insert(0, RefuseTheOperatorsPackages())
"""


def _without_the_operators_packages(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REFUSING)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def test_the_base_install_leaves_the_operators_packages_to_its_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {r.split(">")[0].split("=")[0].split("[")[0] for r in project["dependencies"]}
    assert not base & {"kopf", "kubernetes"}
    extras = project["optional-dependencies"]
    assert {"operator", "s3", "gcs", "kafka"} <= set(extras)
    assert {r.split(">")[0] for r in extras["operator"]} == {"kopf", "kubernetes"}


def test_a_job_runs_tests_and_is_refused_as_before_without_kopf_or_kubernetes(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    ran = _without_the_operators_packages(
        tmp_path,
        LOCKGATE,
        "run",
        "tests.jobs.configurable:running_sum",
        "--arg",
        "count=300",
        "--arg",
        f"output={out}",
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert_running_sums_exact(read_committed(out), 300, 37)

    tested = _without_the_operators_packages(
        tmp_path,
        sys.executable,
        "-c",
        "from lockgate.testing import run_job; from tests.testing import jobs; "
        "print(len(run_job(jobs.running_sum, args={'count': '50'}).outputs['out']))",
    )
    assert tested.stdout.strip() == "50", tested.stderr[-3000:]


def test_what_needs_the_operators_packages_says_which_extra_brings_them(tmp_path: Path) -> None:
    operator = _without_the_operators_packages(
        tmp_path, LOCKGATE, "operator", "--etcd", "http://127.0.0.1:1", "--namespace", "jobs"
    )
    assert operator.returncode == 1
    assert operator.stderr.strip().splitlines()[-1] == (
        "lockgate operator: the operator needs kopf, which is not installed: pip install 'lockgate[operator]'"
    )

    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: lockgate.dev/v1alpha1\nkind: StreamingJob\nmetadata: {name: sums}\n"
        "spec: {replicas: 2, image: x, driver: {resources: {requests: {memory: 1Gi}}}, "
        "job: {entrypoint: 'tests.jobs.configurable:running_sum'}}\n"
    )
    refused = _without_the_operators_packages(tmp_path, LOCKGATE, "run", str(manifest))
    assert refused.returncode == 2
    assert "reading the quantity '1Gi' needs the kubernetes package" in refused.stderr
    assert "pip install 'lockgate[operator]'" in refused.stderr
