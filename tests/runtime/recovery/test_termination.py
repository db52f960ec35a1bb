"""SIGTERM (how Kubernetes stops a pod) and SIGINT (Ctrl-C) end `lockgate run` with
its cleanup: no embedded etcd or Spark JVM left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from examples.chaos import descendants
from tests.runtime.recovery.lockgate_process import committed_count, run_record, start, wait_for


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_with_its_etcd_and_spark(tmp_path: Path, signum: signal.Signals) -> None:
    out = f"file://{tmp_path}/out"
    process = start(
        tmp_path,
        "run",
        "tests.jobs.configurable:running_sum",
        "-p",
        "2",
        "--checkpoint-interval",
        "0.3",
        "--arg",
        "count=unbounded",
        "--arg",
        "rate=2000",
        "--arg",
        f"output={out}",
    )
    wait_for(lambda: committed_count(out) > 0, "committed output", process)
    helpers = descendants(process.pid)
    assert any("etcd" in command for _, command in helpers.values()), "the embedded etcd runs under the run"
    assert any("java" in command for _, command in helpers.values()), "so does Spark's JVM"

    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-3000:]
    assert "lockgate run: interrupted" in err
    assert run_record(tmp_path) is None, "the run's record is removed with it"
    left = [f"{pid} {command}" for pid, (_, command) in helpers.items() if _alive(pid)]
    assert left == [], "processes left behind"
    assert os.path.isdir(tmp_path / ".lockgate" / "etcd"), "etcd's data stays, for the next run"
