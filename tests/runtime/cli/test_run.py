"""`lockgate run JOB --bounded`, as a user runs it: Spark local mode, embedded etcd."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.cli.run import local_task_limit
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.job_identity import JobIdentity, grant, new_password
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.driver.termination import EXIT_INTERRUPTED

from tests.etcd_auth import enable_auth
from tests.exactness import assert_running_sums_exact, assert_word_counts_exact
from tests.polling import wait_until
from tests.process_tree import working_in
from tests.runtime.engine.test_local_engine import _write_lines
from tests.runtime.recovery.lockgate_process import committed_count, finish, start, wait_for

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
REPO = Path(__file__).resolve().parents[3]


def _lockgate(cwd: Path, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if password is not None:
        env["LOCKGATE_ETCD_PASSWORD"] = password
    return subprocess.run(
        [LOCKGATE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def _word_count(
    tmp_path: Path, out: str, *flags: str, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    return _lockgate(
        tmp_path,
        "run",
        "tests.jobs.configurable:word_count",
        "--parallelism",
        "3",
        "--bounded",
        "--checkpoint-interval",
        "0.5",
        "--arg",
        f"input=file://{tmp_path}/lines",
        "--arg",
        f"output=file://{tmp_path}/{out}",
        *flags,
        password=password,
    )


def _assert_exact(url: str, words: list[str]) -> None:
    assert_word_counts_exact(read_committed(url), words)


def test_bounded_word_count_at_parallelism_3_is_exact(tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=3, lines=400)
    result = _word_count(tmp_path, "out")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"at parallelism 3 on local[{local_task_limit()}]" in result.stdout, "slots to rescale in place"
    committed = len(read_committed(f"file://{tmp_path}/out"))
    assert f"finished: read {400 * 3:,} records, committed {committed:,} to the sinks;" in result.stdout
    _assert_exact(f"file://{tmp_path}/out", words)
    # The embedded etcd kept its data under .lockgate/, and the checkpoints are there too.
    assert (tmp_path / ".lockgate" / "etcd").is_dir()
    assert list((tmp_path / ".lockgate" / "checkpoints" / "configurable").glob("chk-*/_metadata"))
    assert not (tmp_path / ".lockgate" / "run.json").exists(), "the run's record is removed at its end"


def test_a_job_runs_exactly_as_its_own_etcd_user_and_writes_no_key_outside_its_own(tmp_path: Path) -> None:
    """Driver, coordinator, tasks and sinks all stay within the job's role: a key
    touched outside `/lockgate/<ns>/<job>/` would fail the run with EtcdAccessError."""
    words = _write_lines(tmp_path / "lines", partitions=3, lines=200)
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    try:
        root = asyncio.run(enable_auth(server))
        identity, password = JobIdentity(JobKeys("team-a", "wc")), new_password()

        async def granted() -> None:
            async with Etcd(root) as etcd:
                await grant(etcd, identity, password)

        asyncio.run(granted())
        job = ("--namespace", "team-a", "--job-id", "wc", "--etcd", server.endpoint)
        result = _word_count(tmp_path, "out", *job, "--etcd-user", identity.name, password=password)
        assert result.returncode == 0, result.stderr[-3000:]
        _assert_exact(f"file://{tmp_path}/out", words)

        async def every_key() -> list[bytes]:
            async with Etcd(root) as etcd:
                return [key for key, _ in await etcd.get_prefix(b"/")]

        assert {key.startswith(b"/lockgate/team-a/wc/") for key in asyncio.run(every_key())} == {True}
    finally:
        server.stop()


def test_an_etcd_user_without_its_password_or_without_an_etcd_is_named(tmp_path: Path) -> None:
    no_password = _word_count(tmp_path, "out", "--etcd", "http://127.0.0.1:1", "--etcd-user", "me")
    assert "--etcd-user me needs its password in $LOCKGATE_ETCD_PASSWORD" in no_password.stderr
    no_etcd = _word_count(tmp_path, "out", "--etcd-user", "me", password="pw")
    assert "lockgate run: --etcd-user goes with --etcd: the embedded etcd has no users" in no_etcd.stderr
    assert (no_password.returncode, no_etcd.returncode) == (1, 2)
    assert not (tmp_path / ".lockgate" / "etcd").exists(), "refused before etcd starts"


def test_a_job_that_does_not_resolve_is_named(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "run", "tests.jobs.configurable:nothing_here", "--bounded")
    assert result.returncode == 2
    assert "module 'tests.jobs.configurable' has no 'nothing_here'" in result.stderr
    assert (
        "it defines: failing_running_sum, offsets_committing_sum, running_sum, slow_running_sum, sums_and_words, word_count"
        in result.stderr
    )


def test_a_job_whose_sources_are_finite_finishes_without_bounded(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    job = ["tests.jobs.configurable:running_sum", "--checkpoint-interval", "0.5"]
    result = _lockgate(
        tmp_path, "run", *job, "--arg", "count=500", "--arg", "keys=7", "--arg", f"output={out}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "finished: read 500 records, committed 500 to the sinks;" in result.stdout
    assert_running_sums_exact(read_committed(out), 500, 7)


def test_the_spark_ui_is_served_when_asked_for_at_the_address_printed(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    args = ["--arg", "count=3000", "--arg", "rate=1000", "--arg", f"output={out}"]
    process = start(tmp_path, "run", "tests.jobs.configurable:running_sum", *args, "--spark-ui", "0")
    try:
        assert process.stdout is not None
        said = next(
            (line for line in iter(process.stdout.readline, "") if line.startswith("Spark UI at ")), None
        )
        assert said is not None, "the address is printed"
        with urllib.request.urlopen(f"{said.split()[-1]}/jobs/", timeout=30) as page:
            assert page.status == 200
            assert b"lockgate-configurable" in page.read(), "the run's own application"
    finally:
        finish(process)
    assert process.returncode == 0


def test_resume_with_nothing_to_resume_is_refused_saying_so(tmp_path: Path) -> None:
    _write_lines(tmp_path / "lines", partitions=1, lines=5)
    result = _word_count(tmp_path, "out", "--resume")
    assert result.returncode == 2, result.stderr[-3000:]  # a refusal: nothing to resume
    assert "has no completed checkpoint to resume from; run it without --resume" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_job_argument_without_a_value_is_named(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "run", "tests.jobs.configurable:word_count", "--arg", "input")
    assert result.returncode == 2
    assert "argument --arg: 'input' must be KEY=VALUE" in result.stderr


def test_a_bad_exchange_timeout_is_refused_naming_the_option(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "run", "tests.jobs.configurable:word_count", "--exchange-timeout", "0")
    assert result.returncode == 2
    assert "--exchange-timeout must be between 0.1 and 3600 seconds, got 0.0" in result.stderr


def test_an_output_location_under_a_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    result = _word_count(tmp_path, "file/out")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"lockgate run: sink 'out': file://{tmp_path}/file/out: {tmp_path}/file, above it, "
        "is a file, not a directory"
    ]
    assert not (tmp_path / ".lockgate").exists(), "neither etcd nor Spark was started"


def test_a_second_run_never_silently_continues_the_first(tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=2, lines=200)
    assert _word_count(tmp_path, "first").returncode == 0

    refused = _word_count(tmp_path, "second")
    assert refused.returncode == 2, "a refusal: the user must say what to do with the earlier run"
    assert re.search(r"has \d+ completed checkpoint\(s\) of an earlier run", refused.stderr)
    assert "running" not in refused.stdout, "decided before Spark's JVM starts"
    assert "Spark" not in refused.stderr
    assert "Resume from it with --resume" in refused.stderr
    assert "--fresh" in refused.stderr

    resumed = _word_count(tmp_path, "first", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(r"restored from file://\S+/chk-\d+", resumed.stdout), resumed.stdout
    _assert_exact(f"file://{tmp_path}/first", words)  # nothing read or written twice

    fresh = _word_count(tmp_path, "second", "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    _assert_exact(f"file://{tmp_path}/second", words)


def test_a_streaming_job_manifest_runs_locally_with_flags_overriding_it(tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=2, lines=200)
    manifest = tmp_path / "wordcount.yaml"
    manifest.write_text(
        f"""
apiVersion: lockgate.dev/v1alpha1
kind: StreamingJob
metadata:
  name: words
spec:
  replicas: 3
  job:
    entrypoint: tests.jobs.configurable:word_count
    args:
      input: file://{tmp_path}/lines
      output: file://{tmp_path}/ignored
  checkpointing:
    interval: 500ms
"""
    )
    result = _lockgate(
        tmp_path, "run", str(manifest), "--bounded", "-p", "2", "--arg", f"output=file://{tmp_path}/out"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "as default/words at parallelism 2" in result.stdout
    _assert_exact(f"file://{tmp_path}/out", words)
    assert not (tmp_path / "ignored").exists()


def test_a_manifest_of_another_kind_is_named(tmp_path: Path) -> None:
    manifest = tmp_path / "deployment.yaml"
    manifest.write_text("kind: Deployment\nmetadata: {name: x}\n")
    result = _lockgate(tmp_path, "run", str(manifest))
    assert result.returncode == 2
    assert "kind is 'Deployment'; lockgate run takes a StreamingJob" in result.stderr


def test_a_manifest_field_the_operator_would_refuse_stops_the_run_before_etcd_starts(tmp_path: Path) -> None:
    manifest = tmp_path / "words.yaml"
    manifest.write_text(
        "kind: StreamingJob\nmetadata: {name: words}\n"
        "spec:\n  job: {entrypoint: 'tests.jobs.configurable:word_count'}\n"
        "  checkpointing: {mode: exactly_once}\n"
    )
    result = _lockgate(tmp_path, "run", str(manifest), "--bounded")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"lockgate run: {manifest}: spec.checkpointing.mode must be one of exactly-once, at-least-once; "
        "got 'exactly_once'\n"
    )
    assert not (tmp_path / ".lockgate").exists(), "nothing started, nothing written"


def test_a_bad_flag_value_is_argparses_error_naming_the_flag(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "run", "tests.jobs.configurable:word_count", "--metrics-port", "99999")
    assert result.returncode == 2
    assert result.stderr.endswith(
        "lockgate run: error: argument --metrics-port: must be a port 0-65535 (0: any free port), got '99999'\n"
    )
    assert not (tmp_path / ".lockgate").exists()


def test_a_local_master_with_fewer_slots_than_tasks_is_refused(tmp_path: Path) -> None:
    result = _lockgate(
        tmp_path, "run", "tests.jobs.configurable:word_count", "-p", "3", "--master", "local[2]"
    )
    assert result.returncode == 2
    assert (
        "lockgate run: --master local[2] has 2 task slot(s); the job's 3 tasks run as one barrier stage"
        in (result.stderr)
    )


def _etcd_serving_at(log: Path) -> float:
    """When the embedded etcd began to serve clients, by its own log."""
    for line in log.read_text().splitlines():
        if "ready to serve client requests" in line:
            return datetime.strptime(line[:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    raise AssertionError(f"etcd never served clients:\n{log.read_text()[-2000:]}")


def test_the_run_record_is_written_only_once_its_etcd_serves(tmp_path: Path) -> None:
    """Other commands (`lockgate checkpoints`, `savepoint`) find the run's etcd
    through `.lockgate/run.json`: it must not name an etcd still starting."""
    _write_lines(tmp_path / "lines", partitions=2, lines=50)
    process = start(
        tmp_path,
        "run",
        "tests.jobs.configurable:word_count",
        "--bounded",
        "--arg",
        f"input=file://{tmp_path}/lines",
        "--arg",
        f"output=file://{tmp_path}/out",
    )
    record = tmp_path / ".lockgate" / "run.json"
    written: list[float] = []
    try:
        wait_for(
            lambda: record.exists() and not written.append(record.stat().st_mtime), "the run record", process
        )
    finally:
        finish(process)
    assert written[0] >= _etcd_serving_at(tmp_path / ".lockgate" / "etcd.log")


def test_a_second_run_in_the_same_directory_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Two runs would share `.lockgate/`: the second's embedded etcd waited on the
    first's database until its start-up bound ran out, and said only that it was
    not healthy."""
    _write_lines(tmp_path / "lines", partitions=1, lines=20)
    job = ["tests.jobs.configurable:word_count", "--arg", f"input=file://{tmp_path}/lines"]
    first = start(tmp_path, "run", *job, "--arg", f"output=file://{tmp_path}/first")
    try:
        wait_for((tmp_path / ".lockgate" / "run.json").exists, "the first run running", first)
        started = time.monotonic()
        second = _word_count(tmp_path, "second")
        took = time.monotonic() - started
        assert first.poll() is None, "the refused run disturbed the first"
    finally:
        first.send_signal(signal.SIGTERM)
        _, first_errors = first.communicate(timeout=120)
    assert first.returncode == EXIT_INTERRUPTED, first_errors[-3000:]
    assert second.returncode == 1, second.stderr[-3000:]
    assert f"another `lockgate run` (pid {first.pid}) is running in {tmp_path}" in second.stderr
    assert "Spark" not in second.stderr, "Spark was started for a run refused at once"
    assert took < 15, f"the refusal took {took:.1f} s"


def test_a_run_killed_with_sigkill_takes_its_etcd_along_and_the_next_run_starts_at_once(
    tmp_path: Path,
) -> None:
    out = f"file://{tmp_path}/out"
    job = ["tests.jobs.configurable:running_sum", "--arg", "rate=500", "--arg", f"output={out}"]
    first = start(tmp_path, "run", *job, "--arg", "count=unbounded", "--checkpoint-interval", "0.2")
    wait_for(lambda: committed_count(out) > 0, "a completed checkpoint", first)
    first.kill()
    first.communicate(timeout=60)
    wait_until(
        lambda: not [p for p in working_in(tmp_path) if "--name lockgate" in p], "the killed run's etcd ended"
    )

    listed = _lockgate(tmp_path, "checkpoints", "list", "configurable")
    assert listed.returncode == 0, listed.stderr
    assert "no etcd given and no `lockgate run` going on here" in listed.stderr, (
        "the record left behind is not a run"
    )

    started = time.monotonic()
    second = _lockgate(tmp_path, "run", *job, "--arg", "count=300", "--fresh")
    assert second.returncode == 0, second.stderr[-3000:]
    assert time.monotonic() - started < 60, "no wait for an etcd that holds the data directory"


def test_a_finished_run_leaves_no_process_behind(tmp_path: Path) -> None:
    """Spark's JVM would exit only once it noticed the run had gone; a run that
    has returned has stopped it. (Output to a file: a pipe would keep the test
    waiting for whoever else holds it open.)"""
    _write_lines(tmp_path / "lines", partitions=1, lines=20)
    job = ["tests.jobs.configurable:word_count", "--bounded", "--arg", f"input=file://{tmp_path}/lines"]
    with open(tmp_path / "output.txt", "w") as output:
        exit_code = subprocess.call(
            [LOCKGATE, "run", *job, "--arg", f"output=file://{tmp_path}/out"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=240,
        )
    assert exit_code == 0, (tmp_path / "output.txt").read_text()[-3000:]
    assert working_in(tmp_path) == []
