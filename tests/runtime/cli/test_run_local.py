"""`lockgate run --local`: the job's tasks as threads of the command's own process,
no JVM, the same job master, etcd and checkpoint storage as a run on Spark."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.cli.run import local_task_limit

from tests.exactness import assert_running_sums_exact, assert_word_counts_exact
from tests.runtime.cli.test_run import _word_count
from tests.runtime.engine.test_local_engine import _write_lines
from tests.runtime.recovery.lockgate_process import run
from tests.runtime.recovery.stopped_sums import COUNT, KEYS, stop_with_savepoint, sums_run


def _records(url: str) -> list[tuple[str, int]]:
    return sorted((record["word"], record["count"]) for record in read_committed(url))


def test_a_local_run_writes_exactly_what_a_run_on_spark_writes(tmp_path: Path) -> None:
    words = _write_lines(tmp_path / "lines", partitions=3, lines=400)
    local = _word_count(tmp_path, "local", "--job-id", "local", "--local")
    assert local.returncode == 0, local.stderr[-3000:]
    assert "at parallelism 3 in this process (--local)" in local.stdout
    assert "Spark" not in local.stdout + local.stderr, "no JVM started"
    spark = _word_count(tmp_path, "spark", "--job-id", "spark")
    assert spark.returncode == 0, spark.stderr[-3000:]
    assert f"at parallelism 3 on local[{local_task_limit()}]" in spark.stdout, "slots to rescale in place"

    assert _records(f"file://{tmp_path}/local") == _records(f"file://{tmp_path}/spark")
    assert_word_counts_exact(read_committed(f"file://{tmp_path}/local"), words)
    committed = len(read_committed(f"file://{tmp_path}/local"))
    finished = f"finished: read {400 * 3:,} records, committed {committed:,} to the sinks;"
    assert finished in local.stdout
    assert finished in spark.stdout


def test_flags_of_a_run_on_spark_are_refused_by_a_local_run_naming_them(tmp_path: Path) -> None:
    refused = _word_count(tmp_path, "out", "--local", "--master", "local[3]", "--spark-ui")
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "lockgate run: --master and --spark-ui are for a run on Spark; --local runs the tasks as threads "
        "of this process: drop --local to run on Spark, or drop --master and --spark-ui"
    ), refused.stderr
    metrics = _word_count(tmp_path, "out", "--local", "--task-metrics-ports", "9250-9259")
    assert metrics.returncode == 2
    assert "lockgate run: --task-metrics-ports is for a run on Spark" in metrics.stderr
    assert not (tmp_path / ".lockgate").exists(), "refused before anything starts"


def test_a_savepoint_of_a_local_run_resumes_on_spark_and_one_of_spark_resumes_locally(tmp_path: Path) -> None:
    """`lockgate savepoint --stop` from another terminal stops a --local run as it
    stops one on Spark (the same embedded etcd); each resumes the other's savepoint
    at another parallelism, and the output is exactly once."""
    local = stop_with_savepoint(tmp_path, 2, "--local")
    on_spark = stop_with_savepoint(tmp_path, 3, "--from-savepoint", local)
    last = run(tmp_path, *sums_run(tmp_path, 1, "--local", "--from-savepoint", on_spark, "--bounded"))
    assert last.returncode == 0, last.stderr[-4000:]
    assert f"restored from {on_spark}" in last.stdout

    assert_running_sums_exact(read_committed(f"file://{tmp_path}/out"), COUNT, KEYS)


def test_lockgate_run_autoscale_scales_the_running_job_up_and_the_output_is_exact(tmp_path: Path) -> None:
    """The driver runs the autoscaler beside its job master: a keyed stage of 10 ms a
    record offered 150 records/s (1.5 times what P = 1 does) is rescaled in place."""
    out = f"file://{tmp_path}/out"
    count, keys = 14 * 150, 13
    job_args = {"count": count, "keys": keys, "rate": 150, "cost_ms": 10, "output": out}
    flags = [x for key, value in job_args.items() for x in ("--arg", f"{key}={value}")]
    autoscale = ["--autoscale", "1:8", "--autoscale-window", "3s", "--scale-down-delay", "1m"]
    result = run(
        tmp_path, "run", "--local", "tests.jobs.costly:costly_running_sum", "-p", "1", "--bounded",
        "--max-parallelism", "32", "--checkpoint-interval", "500ms", *autoscale, *flags, "-v",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "autoscaler: scale up 1 -> " in result.stderr, result.stderr[-3000:]
    assert "rescaled to parallelism" in result.stderr
    assert_running_sums_exact(read_committed(out), count, keys)
