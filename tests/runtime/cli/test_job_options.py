"""Job options as `lockgate run` and the driver take them, down to the spec the tasks get."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.driver.__main__ import main as driver_main
from lockgate.runtime.driver.drive import job_spec
from lockgate.runtime.driver.options import JobSettings, OptionError, add_job_options, settings_from
from lockgate.runtime.driver.preflight import preflight
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.liveness import Liveness

from tests.runtime.cli.refusals import ARGS, WORD_COUNT, refusal, settings


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


@pytest.mark.parametrize("value", ["0", "1h0m1s", "86400"])
def test_an_exchange_timeout_heartbeats_cannot_keep_is_refused_naming_the_option(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(ValueError, match=r"--exchange-timeout must be between 0\.1 and 3600 seconds, got"):
        _spec_from(tmp_path, "--exchange-timeout", value)


def test_the_in_flight_target_reaches_every_task_and_0_means_full_frames(tmp_path: Path) -> None:
    assert _spec_from(tmp_path).task_config(0).in_flight_target_s == DEFAULT_IN_FLIGHT_TARGET_S
    assert _spec_from(tmp_path, "--in-flight-target", "20ms").task_config(1).in_flight_target_s == 0.02
    assert _spec_from(tmp_path, "--in-flight-target", "0").task_config(0).in_flight_target_s is None


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "1ns", "0.0000000001"])
def test_an_in_flight_target_that_is_no_duration_is_refused_naming_the_option(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _spec_from(tmp_path, "--in-flight-target", value)
    assert exit_.value.code == 2
    assert "argument --in-flight-target:" in capsys.readouterr().err


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
        preflight(_settings_from(tmp_path, output=output), None)


def test_an_unwritable_dead_letter_location_is_refused_when_the_options_are_read(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    dead = f"file://{tmp_path}/file/dead"
    with pytest.raises(
        JobDefinitionError, match=rf"source 'lines': {dead}: {tmp_path}/file, above it, is a file"
    ):
        preflight(_settings_from(tmp_path, "--arg", f"dead_letter={dead}"), None)


def test_a_missing_output_directory_is_made_when_the_options_are_read(tmp_path: Path) -> None:
    preflight(_settings_from(tmp_path, output=f"file://{tmp_path}/new/out"), None)
    assert (tmp_path / "new" / "out").is_dir()


def test_the_cluster_driver_refuses_an_unwritable_output_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], etcd_server: EtcdServer
) -> None:
    (tmp_path / "file").write_text("not a directory")
    output = f"file://{tmp_path}/file/out"
    etcd = etcd_server.endpoint  # where the driver records the refusal as the job's status
    argv = ["tests.jobs.configurable:word_count", "--etcd", etcd, "--work-dir", str(tmp_path)]
    status = driver_main([*argv, "--arg", "input=file:///in", "--arg", f"output={output}"])
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"lockgate driver: sink 'out': {output}: {tmp_path}/file, above it, is a file, not a directory"
    ]


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (
            ["--metrics-port", "99999"],
            r"argument --metrics-port: must be a port 0-65535 \(0: any free port\), got '99999'",
        ),
        (["--metrics-port", "-1"], r"argument --metrics-port: must be a port 0-65535"),
        (
            ["--metrics-port", "http"],
            r"argument --metrics-port: must be a port 0-65535 \(0: any free port\), got 'http'",
        ),
        (["--metrics-port", "9249.5"], r"argument --metrics-port: must be a port 0-65535"),
        (["--task-metrics-ports", "70000"], r"argument --task-metrics-ports: .*within 0-65535"),
        (["--task-metrics-ports", "9259-9250"], r"argument --task-metrics-ports: .*first <= last"),
        (
            ["--task-metrics-ports", "many"],
            r"argument --task-metrics-ports: .*'many' is not PORT or FIRST-LAST",
        ),
        (
            ["--metrics-bind", "metrics.example.com"],
            r"argument --metrics-bind: must be an IP address to listen on \(0.0.0.0: every interface\)",
        ),
        (["--metrics-bind", "256.0.0.1"], r"argument --metrics-bind: must be an IP address"),
        (["--parallelism", "0"], r"argument --parallelism/-p: must be an integer from 1 to 32768, got '0'"),
        (["-p", "-2"], r"argument --parallelism/-p: must be an integer from 1 to 32768, got '-2'"),
        (["-p", "two"], r"argument --parallelism/-p: must be an integer from 1 to 32768, got 'two'"),
        (["--max-parallelism", "40000"], r"argument --max-parallelism: must be an integer from 1 to 32768"),
        (
            ["-p", "8", "--max-parallelism", "4"],
            r"parallelism 8 \(--parallelism\) exceeds max parallelism 4 \(--max-parallelism\)",
        ),
        (
            ["--max-parallelism", "1"],
            r"parallelism 2 \(the default\) exceeds max parallelism 1 \(--max-parallelism\)",
        ),
        (
            ["--checkpoint-interval", "0"],
            r"argument --checkpoint-interval: must be more than 0 seconds, got '0'",
        ),
        (["--checkpoint-interval", "nan"], r"argument --checkpoint-interval: 'nan' is not a duration"),
        (["--checkpoint-interval", "inf"], r"argument --checkpoint-interval: 'inf' is not a duration"),
        (["--checkpoint-interval", "-5"], r"argument --checkpoint-interval: '-5' is not a duration"),
        (["--checkpoint-timeout", "0s"], r"argument --checkpoint-timeout: must be more than 0 seconds"),
        (
            ["--min-pause", "soon"],
            r"argument --min-pause: 'soon' is not a duration like 500ms, 10s, 1m30s or 2h \(a plain number is seconds\)",
        ),
        (["--max-concurrent", "0"], r"argument --max-concurrent: must be an integer from 1 to"),
        (["--tolerable-failures", "-1"], r"argument --tolerable-failures: must be an integer from 0 to"),
        (["--retained", "0"], r"argument --retained: must be an integer from 1 to"),
        (["--takeover-wait", "-1"], r"argument --takeover-wait: '-1' is not a duration"),
        (["--restart-attempts", "0"], r"argument --restart-attempts: must be an integer from 1 to"),
        (["--exchange-timeout", "inf"], r"argument --exchange-timeout: 'inf' is not a duration"),
        (["--restart-delay", "nan"], r"argument --restart-delay: 'nan' is not a duration"),
        (
            ["--restart-failure-interval", "0"],
            r"argument --restart-failure-interval: must be more than 0 seconds",
        ),
        (
            [
                "--restart-strategy",
                "exponential-backoff",
                "--restart-delay",
                "10",
                "--restart-max-delay",
                "2",
            ],
            r"--restart-delay 10 s exceeds --restart-max-delay 2 s",
        ),
        (["--job-id", "a/b"], r"argument --job-id: 'a/b' is not a valid name"),
        (["--namespace", "../x"], r"argument --namespace: '../x' is not a valid name"),
        (["--arg", "input"], r"argument --arg: 'input' must be KEY=VALUE"),
        (
            ["--checkpoint-dir", "checkpoints"],
            r"argument --checkpoint-dir: checkpoints: a relative path names a different directory on each",
        ),
        (
            ["--checkpoint-dir", "file://checkpoints"],
            r"argument --checkpoint-dir: file://checkpoints: a relative path names",
        ),
        (
            ["--checkpoint-dir", "memory://x"],
            r"argument --checkpoint-dir: memory://x: memory:// lives in one process",
        ),
        (["--savepoint-dir", "rel/dir"], r"argument --savepoint-dir: rel/dir: a relative path names"),
        (
            ["--savepoint-dir", __file__],
            rf"argument --savepoint-dir: {__file__}: it is a file, not a directory",
        ),
        (
            ["--savepoint-dir", f"file://{__file__}/savepoints"],
            rf"argument --savepoint-dir: file://{__file__}/savepoints: {__file__}, above it, is a file",
        ),
        (
            ["--checkpoint-dir", "file:///proc/self/checkpoints"],
            r"argument --checkpoint-dir: file:///proc/self/checkpoints: /proc is the kernel's view",
        ),
        (["--checkpoint-dir", "/sys/x"], r"argument --checkpoint-dir: /sys/x: /sys is the kernel's view"),
        (["--savepoint-dir", "/dev"], r"argument --savepoint-dir: /dev: /dev is the kernel's view"),
        (["--from-savepoint", "chk-7"], r"argument --from-savepoint: chk-7: a relative path names"),
        (["--import-unsigned-savepoint"], r"--import-unsigned-savepoint goes with --from-savepoint"),
        (
            ["--snapshot-key-file", "/nonexistent/key"],
            r"argument --snapshot-key-file: snapshot key file /nonexistent/key: No such file",
        ),
    ],
)
def test_a_bad_option_is_refused_naming_the_flag_and_what_it_takes(
    tmp_path: Path, flags: list[str], complaint: str
) -> None:
    message = refusal(tmp_path, WORD_COUNT, *ARGS, *flags)
    assert re.search(complaint, message), message
    assert "Traceback" not in message


def _preflight_refusal(tmp_path: Path, *argv: str) -> str:
    """The message a storage flag is refused with once the job is imported."""
    with pytest.raises(OptionError) as refused:
        preflight(settings(tmp_path, *argv), None)
    return str(refused.value)


def test_an_unknown_storage_protocol_is_refused_once_the_job_is_imported(tmp_path: Path) -> None:
    message = _preflight_refusal(tmp_path, WORD_COUNT, *ARGS, "--checkpoint-dir", "foo://bucket/x")
    assert re.search(
        r"argument --checkpoint-dir: foo://bucket/x: unknown protocol 'foo' .*lockgate\[s3\]", message
    )


def test_a_filesystem_the_job_registers_is_a_storage_protocol_it_may_use(tmp_path: Path) -> None:
    """The fault soak's jobs register `faulty://` when imported: the flag naming it is
    checked after that, not refused before the job is known."""
    url = f"faulty://{tmp_path}/checkpoints"
    # A process of its own: in this one, another test may have registered it already.
    code = (
        "import sys; from pathlib import Path\n"
        "from lockgate.runtime.driver.preflight import preflight\n"
        "from tests.runtime.cli.refusals import ARGS, settings\n"
        "import fsspec; assert 'faulty' not in fsspec.available_protocols()\n"
        f"chosen = settings(Path({str(tmp_path)!r}), 'tests.faults.soak_job:running_sum', *ARGS, "
        f"'--checkpoint-dir', {url!r})\n"
        "preflight(chosen, None)\n"
        "print(chosen.checkpoint_dir)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == url


def test_an_object_store_without_its_filesystem_installed_says_which_extra_to_install(tmp_path: Path) -> None:
    # gcsfs is no test dependency (s3fs is: the end-to-end tests use S3)
    assert importlib.util.find_spec("gcsfs") is None, "this test needs an object store not installed"
    message = _preflight_refusal(tmp_path, WORD_COUNT, *ARGS, "--checkpoint-dir", "gs://bucket/checkpoints")
    assert (
        "argument --checkpoint-dir: gs://bucket/checkpoints: the file system for gs:// is not installed "
        "(Please install gcsfs to access Google Storage): pip install 'lockgate[gcs]'" in message
    )


def test_good_values_of_every_checked_option_are_taken(tmp_path: Path) -> None:
    chosen = settings(
        tmp_path,
        WORD_COUNT,
        *ARGS,
        *("-p", "3", "--max-parallelism", "3", "--metrics-port", "0", "--task-metrics-ports", "9250-9259"),
        *("--checkpoint-interval", "500ms", "--checkpoint-timeout", "2m", "--min-pause", "0"),
        *("--takeover-wait", "1.5", "--checkpoint-dir", f"file://{tmp_path}/c", "--savepoint-dir", "/abs/s"),
        *("--job-id", "words-1", "--namespace", "team.a", "--arg", "extra=a=b"),
    )
    assert (chosen.parallelism, chosen.max_parallelism, chosen.metrics_port) == (3, 3, 0)
    assert chosen.metrics_bind == "127.0.0.1", "by default metrics are served to this host only"
    assert settings(tmp_path, WORD_COUNT, *ARGS, "--metrics-bind", "0.0.0.0").metrics_bind == "0.0.0.0"
    assert (chosen.checkpoint.interval_s, chosen.checkpoint.timeout_s, chosen.takeover_wait_s) == (
        0.5,
        120.0,
        1.5,
    )
    assert (chosen.checkpoint_dir, chosen.savepoint_dir) == (f"file://{tmp_path}/c", "/abs/s")
    assert (chosen.keys.namespace, chosen.keys.job, chosen.args["extra"]) == ("team.a", "words-1", "a=b")


def test_resume_continues_from_the_latest_checkpoint_and_a_manifests_initial_savepoint_yields_to_it(
    tmp_path: Path,
) -> None:
    assert _settings_from(tmp_path).earlier_checkpoints == "refuse"
    assert _settings_from(tmp_path, "--resume").earlier_checkpoints == "require"
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: lockgate.dev/v1alpha1\nkind: StreamingJob\nmetadata: {name: sums}\n"
        "spec: {replicas: 2, image: x, initialSavepointPath: 'file:///savepoints/savepoint-1', job: "
        f"{{entrypoint: 'tests.jobs.configurable:word_count', args: {{input: 'file:///in', output: 'file://{tmp_path}/o'}}}}}}\n"
    )
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    resumed = settings_from(parser.parse_args([str(manifest), "--resume"]), tmp_path, fresh_by_default=True)
    assert resumed.from_savepoint is None
    assert resumed.earlier_checkpoints == "require"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--resume", "--fresh"], "--fresh and --resume"),
        (["--resume", "--from-savepoint", "file:///sp/savepoint-1"], "--resume and --from-savepoint"),
        (["--fresh", "--from-savepoint", "file:///sp/savepoint-1"], "--fresh and --from-savepoint"),
    ],
)
def test_two_flags_that_each_say_where_the_run_starts_are_refused_naming_both(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    with pytest.raises(OptionError, match=f"{named} each say where the run starts: give one"):
        _settings_from(tmp_path, *flags)


@pytest.mark.parametrize("spelling", ["{link}/checkpoints", "file://{link}/checkpoints", "//proc/self/x"])
def test_a_storage_location_reaching_a_kernel_filesystem_another_way_is_refused(
    tmp_path: Path, spelling: str
) -> None:
    """A symlink into /proc, or `//proc` (which POSIX path normalisation keeps as
    written), was accepted and failed only at the first checkpoint."""
    link = tmp_path / "proc-link"
    link.symlink_to("/proc/self")
    url = spelling.format(link=link)
    message = refusal(tmp_path, WORD_COUNT, *ARGS, "--checkpoint-dir", url)
    assert f"argument --checkpoint-dir: {url}: /proc is the kernel's view of processes and devices" in message
