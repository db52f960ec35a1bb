"""The README's demo works: it is what a new user runs first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.exactness import assert_running_sums_exact
from tests.kafka_broker import KafkaBroker
from tests.runtime.recovery.lockgate_process import run

ROOT = Path(__file__).resolve().parent.parent


def _run_example(script: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_state_demo_restores_every_count_at_another_parallelism() -> None:
    result = _run_example("state_demo.py")
    assert result.stdout.count(": OK") == 2
    assert "Every count survived the snapshot and the rescale." in result.stdout


def test_wordcount_demo_runs_on_spark_exactly_once() -> None:
    result = _run_example("wordcount_demo.py")
    assert "each count exactly once" in result.stdout


def test_recovery_demo_kills_a_worker_rescales_and_checks_exactly_once() -> None:
    result = _run_example("recovery_demo.py")
    assert "killing Python worker" in result.stdout
    assert "recovered from the latest checkpoint" in result.stdout
    assert "resuming from the savepoint at parallelism 3" in result.stdout
    assert "each committed exactly once, every key's sum intact: OK" in result.stdout


def test_sessions_demo_gives_every_session_of_out_of_order_clicks_once_on_spark() -> None:
    result = _run_example("sessions_demo.py")
    assert "each exactly once: OK" in result.stdout


def test_the_kafka_example_sums_a_topic_into_another_exactly_once(tmp_path: Path, kafka: KafkaBroker) -> None:
    source, sink = kafka.create_topic(3, "numbers"), kafka.create_topic(2, "sums")
    count, keys = 3_000, 17
    kafka.produce_numbers(source, 0, count, keys=keys, partitions=3)
    arguments = [
        "--arg",
        f"bootstrap={kafka.bootstrap_servers}",
        "--arg",
        f"input={source}",
        "--arg",
        f"output={sink}",
        "--arg",
        "partitioning=subtask",  # on tansu: docs/operations.md, "What it was tested on"
    ]
    result = run(
        tmp_path,
        "run",
        "examples.kafka_sums:build",
        "-p",
        "2",
        "--bounded",
        "--arg",
        "stop_at=latest",
        *arguments,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    output = [json.loads(value) for _, _, _, value in kafka.read(sink)]
    assert_running_sums_exact(output, count, keys)
