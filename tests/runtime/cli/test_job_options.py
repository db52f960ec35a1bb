"""Job options as `lockgate run` and the driver take them, down to the spec the tasks get."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.driver import add_job_options, settings_from
from lockgate.runtime.driver.__main__ import main as driver_main
from lockgate.runtime.driver.drive import job_spec
from lockgate.runtime.driver.options import JobSettings
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.liveness import Liveness


def _settings_from(tmp_path: Path, *flags: str, output: str | None = None) -> JobSettings:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    arguments = parser.parse_args(
        [
            "tests.jobs.configurable:word_count",
            "--arg",
            "input=file:///in",
            "--arg",
            f"output={output or f'file://{tmp_path}/out'}",
            *flags,
        ]
    )
    return settings_from(arguments, tmp_path, fresh_by_default=True)


def _spec_from(tmp_path: Path, *flags: str) -> JobSpec:
    return job_spec(_settings_from(tmp_path, *flags), EtcdConfig.from_url("http://127.0.0.1:2379"))


def test_the_exchange_timeout_reaches_every_task_with_heartbeats_at_a_tenth(tmp_path: Path) -> None:
    assert _spec_from(tmp_path).liveness() == Liveness(10.0, 1.0)
    assert _spec_from(tmp_path, "--exchange-timeout", "4").liveness() == Liveness(4.0, 0.4)


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "86400"])
def test_an_exchange_timeout_heartbeats_cannot_keep_is_refused_naming_the_option(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(ValueError, match=r"--exchange-timeout must be between 0\.1 and 3600 seconds, got"):
        _spec_from(tmp_path, "--exchange-timeout", value)


def test_a_job_spec_refuses_a_liveness_timeout_naming_its_field(tmp_path: Path) -> None:
    spec = _spec_from(tmp_path)
    with pytest.raises(ValueError, match="liveness_timeout_s must be between"):
        dataclasses.replace(spec, liveness_timeout_s=0.0)


def test_an_output_location_the_job_cannot_write_is_refused_when_the_options_are_read(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    output = f"file://{tmp_path}/file/out"
    with pytest.raises(
        JobDefinitionError, match=rf"sink 'out': {output}: {tmp_path}/file, above it, is a file"
    ):
        _settings_from(tmp_path, output=output)


def test_an_unwritable_dead_letter_location_is_refused_when_the_options_are_read(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    dead = f"file://{tmp_path}/file/dead"
    with pytest.raises(
        JobDefinitionError, match=rf"source 'lines': {dead}: {tmp_path}/file, above it, is a file"
    ):
        _settings_from(tmp_path, "--arg", f"dead_letter={dead}")


def test_a_missing_output_directory_is_made_when_the_options_are_read(tmp_path: Path) -> None:
    _settings_from(tmp_path, output=f"file://{tmp_path}/new/out")
    assert (tmp_path / "new" / "out").is_dir()


def test_the_cluster_driver_refuses_an_unwritable_output_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a directory")
    output = f"file://{tmp_path}/file/out"
    argv = ["tests.jobs.configurable:word_count", "--etcd", "http://127.0.0.1:9", "--work-dir", str(tmp_path)]
    status = driver_main([*argv, "--arg", "input=file:///in", "--arg", f"output={output}"])
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"lockgate driver: sink 'out': {output}: {tmp_path}/file, above it, is a file, not a directory"
    ]
