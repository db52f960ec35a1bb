"""Running `lockgate run`'s option handling (argparse, the manifest, the checks across
options) to the point where it refuses: no etcd, no Spark."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import yaml
from lockgate.runtime.driver.options import JobSettings, add_job_options, settings_from

WORD_COUNT = "tests.jobs.configurable:word_count"
ARGS = ["--arg", "input=file:///in", "--arg", "output=file:///out"]


def settings(tmp_path: Path, *argv: str) -> JobSettings:
    parser = argparse.ArgumentParser(prog="lockgate run")
    add_job_options(parser)
    return settings_from(parser.parse_args(list(argv)), tmp_path, fresh_by_default=True)


def refusal(tmp_path: Path, *argv: str) -> str:
    """The message `argv` is refused with, by argparse or by the checks after it."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            settings(tmp_path, *argv)
    except SystemExit as exit_:
        code = exit_.code
    except ValueError as error:
        return str(error)
    else:
        raise AssertionError(f"{argv} was accepted")
    assert code == 2, stderr.getvalue()
    return stderr.getvalue()


def manifest(tmp_path: Path, spec: dict[str, object] | None = None, **document: object) -> str:
    """A StreamingJob manifest of the word count, with `spec` merged into its spec."""
    body: dict[str, object] = {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "StreamingJob",
        "metadata": {"name": "words"},
        "spec": {
            "job": {"entrypoint": WORD_COUNT, "args": {"input": "file:///in", "output": "file:///out"}},
            **(spec or {}),
        },
        **document,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)
