"""A job that cannot be built — its module does not import, its `build()` raises, its
entrypoint names nothing — is refused before etcd or Spark start: exit 2, the job's
own traceback (none of the runtime's frames), and, where the run has an etcd, the
failure recorded as the job's status, as the operator reads it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
REPO = Path(__file__).resolve().parents[3]
RUNTIME = "lockgate/runtime/"

BROKEN = {
    "build_raises": (
        """
        def _threshold(env):
            raise ValueError("the job's own complaint")


        def build(env):
            _threshold(env)
        """,
        ["line 2, in _threshold", "line 6, in build", "ValueError: the job's own complaint"],
    ),
    "syntax_error": (
        """
        def build(env)
            pass
        """,
        ['syntax_error.py", line 1', "SyntaxError"],
    ),
    "imports_missing": (
        """
        import not_a_package_anywhere


        def build(env):
            pass
        """,
        ['imports_missing.py", line 1, in <module>', "No module named 'not_a_package_anywhere'"],
    ),
    "misuses_the_api": (
        """
        from lockgate.runtime import GeneratorSource


        def build(env):
            env.source(GeneratorSource(10), name="numbers").map(3)
        """,
        [".map() needs a function, got int 3", 'misuses_the_api.py", line 5, in build'],
    ),
}


def _module(tmp_path: Path, name: str) -> str:
    text, _ = BROKEN[name]
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text).lstrip("\n"))
    return f"{name}:build"


def _run(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_lockgate_run_shows_the_jobs_own_traceback_and_exits_2(tmp_path: Path, name: str) -> None:
    result = _run(tmp_path, LOCKGATE, "run", _module(tmp_path, name), "--bounded")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"lockgate run: job {name}:build "), result.stderr
    for expected in BROKEN[name][1]:
        assert expected in result.stderr
    assert RUNTIME not in result.stderr, "only the job's frames"
    assert "<frozen importlib" not in result.stderr
    assert not (tmp_path / ".lockgate" / "etcd").exists(), "no etcd started for a job that cannot run"


def test_a_missing_job_argument_is_one_line_naming_it_and_where_the_job_asked(tmp_path: Path) -> None:
    (tmp_path / "needs.py").write_text(
        "def _threshold(env):\n    return env.args['threshold']\n\n\ndef build(env):\n    _threshold(env)\n"
    )
    result = _run(tmp_path, LOCKGATE, "run", "needs:build", "--arg", "limit=3")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "lockgate run: job argument 'threshold' is missing: give it with --arg threshold=VALUE (or in the "
        "manifest's spec.job.args); given: limit (asked for in _threshold, needs.py line 2)"
    ]


def test_a_job_argument_of_the_wrong_kind_is_named_beside_pythons_own_error(tmp_path: Path) -> None:
    (tmp_path / "counts.py").write_text(
        "def build(env):\n    int(env.args['count'])\ndef typed(env):\n    env.args.int('count')\n"
    )
    for function, complaint in [
        (
            "build",
            "ValueError: invalid literal for int() with base 10: 'abc'\n'abc' is the value of job argument count",
        ),
        (
            "typed",
            "job argument count='abc' is not an integer: give it with --arg count=... (asked for in typed",
        ),
    ]:
        result = _run(tmp_path, LOCKGATE, "run", f"counts:{function}", "--arg", "count=abc", "--arg", "x=1")
        assert result.returncode == 2, result.stderr
        assert complaint in result.stderr
        assert RUNTIME not in result.stderr


@pytest.mark.parametrize(
    ("entrypoint", "complaint"),
    [
        ("no_such_module:build", "cannot import module 'no_such_module'"),
        ("tests.jobs.configurable:nothing_here", "module 'tests.jobs.configurable' has no 'nothing_here'"),
        ("tests.jobs.configurable", "must be module:function"),
    ],
)
def test_an_entrypoint_that_names_nothing_is_refused_with_exit_2(
    tmp_path: Path, entrypoint: str, complaint: str
) -> None:
    result = _run(tmp_path, LOCKGATE, "run", entrypoint, "--bounded")
    assert result.returncode == 2, result.stderr
    assert complaint in result.stderr
    assert "Traceback" not in result.stderr


async def _status(etcd_config: EtcdConfig, keys: JobKeys):  # type: ignore[no-untyped-def]
    async with Etcd(etcd_config) as etcd:
        return await read_status(etcd, keys)


async def test_lockgate_run_with_an_etcd_records_the_failure_as_the_jobs_status(
    tmp_path: Path, etcd_config: EtcdConfig, keys: JobKeys
) -> None:
    endpoint = etcd_config.endpoints[0]
    result = _run(
        tmp_path,
        LOCKGATE,
        "run",
        _module(tmp_path, "build_raises"),
        *("--etcd", endpoint, "--namespace", keys.namespace, "--job-id", keys.job),
    )
    assert result.returncode == 2, result.stderr
    status = await _status(etcd_config, keys)
    assert status is not None
    assert status.state == "failed"
    assert status.message is not None
    assert "ValueError: the job's own complaint" in status.message
    assert "line 6, in build" in status.message


async def test_the_driver_the_operator_launches_records_the_failure_with_its_name(
    tmp_path: Path, etcd_config: EtcdConfig, keys: JobKeys
) -> None:
    result = _run(
        tmp_path,
        sys.executable,
        "-m",
        "lockgate.runtime.driver",
        _module(tmp_path, "syntax_error"),
        *("--etcd", etcd_config.endpoints[0], "--namespace", keys.namespace, "--job-id", keys.job),
        *("--driver-name", "sums-driver-3"),
    )
    assert result.returncode == 2, result.stderr
    assert "SyntaxError" in result.stderr
    assert RUNTIME not in result.stderr
    status = await _status(etcd_config, keys)
    assert status is not None
    assert (status.state, status.driver) == ("failed", "sums-driver-3")
    assert status.message is not None
    assert 'syntax_error.py", line 1' in status.message
    assert status.failure_class == "code", "never relaunched by the operator"
    assert status.traceback is not None
    assert 'syntax_error.py", line 1' in status.traceback


EXPLODING = """
from lockgate.runtime import FileSink, GeneratorSource


def explode(record):
    if record["n"] == 50:
        return 1 // 0
    return record


def build(env):
    (
        env.source(GeneratorSource(200), name="numbers")
        .map(explode, name="explode")
        .sink(FileSink(env.args["output"]), name="out")
    )
"""


def test_a_failure_in_the_jobs_code_on_an_executor_is_its_own_traceback_once(tmp_path: Path) -> None:
    (tmp_path / "exploding.py").write_text(EXPLODING.lstrip("\n"))
    job = ["exploding.py:build", "--arg", f"output=file://{tmp_path}/out", "--restart-strategy", "none"]

    result = _run(tmp_path, LOCKGATE, "run", *job)
    assert result.returncode == 1, result.stderr
    assert (
        "lockgate run: gave up after 0 restart(s) (no restarts); last failure: JobCodeError: the job's code "
        "raised ZeroDivisionError: integer division or modulo by zero in explode (exploding.py, line 6)"
    ) in result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr
    assert 'exploding.py", line 6, in explode' in result.stderr
    assert RUNTIME not in result.stderr, "only the job's frames"
    assert "Py4J" not in result.stderr
    assert "\tat org.apache.spark" not in result.stderr, "no Java stack"
    # Quiet by default: neither Java's nor Spark's start-up notes, nor a task's line per failure.
    # ("saving Spark's JVM classes …" is said once per install, by its first run on Spark.)
    said = [
        line
        for line in result.stderr.splitlines()
        if not line.startswith(("Traceback", "  ", "saving Spark's JVM classes in "))
    ]
    assert len(said) == 2, result.stderr
    assert said[0].startswith("lockgate run: gave up after 0 restart(s)")
    assert said[1] == "ZeroDivisionError: integer division or modulo by zero"

    debugged = _run(tmp_path, LOCKGATE, "run", *job, "--debug", "--fresh")
    assert debugged.returncode == 1
    assert RUNTIME in debugged.stderr, "--debug: the runtime's frames too"
    assert "INFO lockgate.runtime" not in result.stderr
    assert "DEBUG lockgate.runtime" in debugged.stderr, "--debug logs everything, the tasks' too"


@pytest.mark.parametrize("input_name", ["missing", "transactions.jsonl"])
def test_a_bounded_run_whose_source_has_nothing_to_read_is_refused_before_it_starts(
    tmp_path: Path, input_name: str
) -> None:
    if input_name != "missing":
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / input_name).write_text('{"word": "a"}\n')
    result = _run(
        tmp_path,
        LOCKGATE,
        "run",
        "tests.jobs.configurable:word_count",
        "--bounded",
        "--arg",
        f"input=file://{tmp_path}/in",
        "--arg",
        f"output=file://{tmp_path}/out",
    )
    assert result.returncode == 2, result.stderr
    problem = "does not exist" if input_name == "missing" else f"it holds {input_name}"
    assert "source 'lines' would read nothing: " in result.stderr, result.stderr
    assert problem in result.stderr, result.stderr
    assert "'part-*.jsonl'" in result.stderr, result.stderr
    assert not (tmp_path / ".lockgate" / "etcd").exists(), "refused before etcd and Spark start"
