"""`lockgate run --local`: the job's tasks as threads of the command's own process,
no JVM, the same job master, etcd and checkpoint storage as a run on Spark."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime import read_committed

from tests.exactness import assert_running_sums_exact, assert_word_counts_exact
from tests.runtime.engine.test_local_engine import _write_lines
from tests.runtime.recovery.lockgate_process import committed_count, finish, run, run_record, start, wait_for


def _word_count(tmp_path: Path, out: str, *flags: str) -> list[str]:
    return [
        "run",
        "tests.jobs.configurable:word_count",
        "-p",
        "3",
        "--bounded",
        "--checkpoint-interval",
        "0.5",
        "--arg",
        f"input=file://{tmp_path}/lines",
        "--arg",
        f"output=file://{tmp_path}/{out}",
        *flags,
    ]


def _records(url: str) -> list[tuple[str, int]]:
    return sorted((record["word"], record["count"]) for record in read_committed(url))


def test_a_local_run_writes_exactly_what_a_run_on_spark_writes(tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=3, lines=400)
    local = run(tmp_path, *_word_count(tmp_path, "local", "--job-id", "local", "--local"))
    assert local.returncode == 0, local.stderr[-3000:]
    assert "at parallelism 3 in this process (--local)" in local.stdout
    assert "Spark" not in local.stdout + local.stderr, "no JVM started"
    spark = run(tmp_path, *_word_count(tmp_path, "spark", "--job-id", "spark"))
    assert spark.returncode == 0, spark.stderr[-3000:]
    assert "at parallelism 3 on local[3]" in spark.stdout

    assert _records(f"file://{tmp_path}/local") == _records(f"file://{tmp_path}/spark")
    assert_word_counts_exact(read_committed(f"file://{tmp_path}/local"), words)
    finished = f"finished: read {400 * 3:,} records, wrote {len(words):,}"
    assert finished in local.stdout
    assert finished in spark.stdout


def test_flags_of_a_run_on_spark_are_refused_by_a_local_run_naming_them(tmp_path: Path) -> None:
    refused = run(tmp_path, *_word_count(tmp_path, "out", "--local", "--master", "local[3]", "--spark-ui"))
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "lockgate run: --master and --spark-ui are for a run on Spark; --local runs the tasks as threads "
        "of this process: drop --local to run on Spark, or drop --master and --spark-ui"
    ), refused.stderr
    metrics = run(tmp_path, *_word_count(tmp_path, "out", "--local", "--task-metrics-ports", "9250-9259"))
    assert metrics.returncode == 2
    assert "lockgate run: --task-metrics-ports is for a run on Spark" in metrics.stderr
    assert not (tmp_path / ".lockgate").exists(), "refused before anything starts"


COUNT, KEYS, RATE = 12_000, 23, 1_000  # 12 s of input: a stop from another process comes mid-stream


def _sums(tmp_path: Path, parallelism: int, *flags: str) -> list[str]:
    return [
        "run",
        "tests.jobs.configurable:running_sum",
        "--job-id",
        "sums",
        "-p",
        str(parallelism),
        "--checkpoint-interval",
        "0.3",
        "--arg",
        f"count={COUNT}",
        "--arg",
        f"keys={KEYS}",
        "--arg",
        f"rate={RATE}",
        "--arg",
        f"output=file://{tmp_path}/out",
        *flags,
    ]


def _stop_with_savepoint(tmp_path: Path, parallelism: int, *flags: str) -> str:
    out_url = f"file://{tmp_path}/out"
    before = committed_count(out_url)
    process = start(tmp_path, *_sums(tmp_path, parallelism, *flags))
    wait_for(lambda: committed_count(out_url) > before, f"new committed output at P = {parallelism}", process)
    assert run_record(tmp_path) is not None
    savepoint = run(tmp_path, "savepoint", "sums", "--stop")
    assert savepoint.returncode == 0, savepoint.stderr
    path = savepoint.stdout.strip().splitlines()[-1]
    out, _ = finish(process)
    assert out.strip().splitlines()[-1] == path, "the run prints the savepoint path last and exits 0"
    assert committed_count(out_url) < COUNT, "the job was stopped mid-stream"
    return path


def test_a_savepoint_of_a_local_run_resumes_on_spark_and_one_of_spark_resumes_locally(tmp_path: Path) -> None:
    """`lockgate savepoint --stop` from another terminal stops a --local run as it
    stops one on Spark (the same embedded etcd); each resumes the other's savepoint
    at another parallelism, and the output is exactly once."""
    local = _stop_with_savepoint(tmp_path, 2, "--local")
    on_spark = _stop_with_savepoint(tmp_path, 3, "--from-savepoint", local)
    last = run(tmp_path, *_sums(tmp_path, 1, "--local", "--from-savepoint", on_spark, "--bounded"))
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {on_spark}" in last.stdout

    assert_running_sums_exact(read_committed(f"file://{tmp_path}/out"), COUNT, KEYS)
