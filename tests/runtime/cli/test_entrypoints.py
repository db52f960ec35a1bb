"""How `lockgate run` is told which job to run: a module, a file, a manifest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lockgate.runtime import read_committed

from tests.runtime.cli.test_run import _lockgate

JOB = """
from lockgate.runtime import FileSink, GeneratorSource, StreamEnvironment


def build(env: StreamEnvironment) -> None:
    numbers = env.source(GeneratorSource(300, keys=5, partitions=2), name="numbers")
    numbers.sink(FileSink(env.args["output"]), name="out")
"""


def _job_file(tmp_path: Path, name: str) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    (jobs / name).write_text(JOB)
    return jobs / name


def test_a_job_given_by_its_file_runs_and_its_tasks_import_that_file(tmp_path: Path) -> None:
    """Failed before: only `module:function` was understood (the file is on no
    import path here: neither the driver nor Spark's workers could import it)."""
    _job_file(tmp_path, "my_numbers.py")
    output = f"file://{tmp_path}/out"
    result = _lockgate(
        tmp_path, "run", "jobs/my_numbers.py:build", "-p", "2", "--bounded", "--arg", f"output={output}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "running my_numbers:build as default/my_numbers at parallelism 2" in result.stdout
    assert len(read_committed(output)) == 300


def test_a_python_file_without_its_function_is_not_read_as_a_manifest(tmp_path: Path) -> None:
    """Failed before: `lockgate run job.py` parsed the Python file as YAML."""
    _job_file(tmp_path, "my_numbers.py")
    result = _lockgate(tmp_path, "run", "jobs/my_numbers.py", "--bounded")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "jobs/my_numbers.py is a Python file: name the function that builds the job, e.g. jobs/my_numbers.py:build"
    )
    assert "YAML" not in result.stderr
    assert not (tmp_path / ".lockgate" / "etcd").exists(), "refused before anything started"


@pytest.mark.parametrize(
    ("name", "complaint"),
    [
        (
            "my-numbers.py",
            "my-numbers.py cannot be imported as a module (its name is not a Python identifier); "
            "rename it, e.g. to my_numbers.py",
        ),
        (
            "json.py",
            "a module called 'json' is already part of Python or of the runtime, so json.py would not "
            "be the one imported; rename it, e.g. to json_job.py",
        ),
        ("absent.py", "there is no file jobs/absent.py"),
    ],
)
def test_a_job_file_that_cannot_be_imported_is_refused_naming_why(
    tmp_path: Path, name: str, complaint: str
) -> None:
    if name != "absent.py":
        _job_file(tmp_path, name)
    result = _lockgate(tmp_path, "run", f"jobs/{name}:build", "--bounded")
    assert result.returncode == 2
    assert complaint in result.stderr
    assert "Traceback" not in result.stderr


def test_the_version_names_lockgate_python_and_pyspark(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "--version")
    assert result.returncode == 0
    assert re.fullmatch(
        r"lockgate \d+\.\d+\.\d+ \(Python 3\.\d+\.\d+, pyspark \d+\.\d+\.\d+\)\n", result.stdout
    )
