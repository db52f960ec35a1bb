"""SIGTERM (how Kubernetes stops a pod), SIGINT, and Ctrl-C in a terminal (SIGINT
to the whole foreground process group) end `lockgate run` with its cleanup: no
embedded etcd or Spark JVM left behind, the coordinator's lease revoked."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from lockgate.console import interrupted

from tests.process_tree import descendants, working_in
from tests.runtime.recovery.lockgate_process import (
    LOCKGATE,
    committed_count,
    environment,
    run_record,
    start,
    wait_for,
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "Ctrl-C"],
)
def test_a_signal_stops_the_run_with_its_etcd_and_spark(
    tmp_path: Path, signum: signal.Signals, to_group: bool
) -> None:
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
        own_group=to_group,
    )
    wait_for(lambda: committed_count(out) > 0, "committed output", process)
    helpers = descendants(process.pid)
    assert any("etcd" in command for _, command in helpers.values()), "the embedded etcd runs under the run"
    assert any("java" in command for _, command in helpers.values()), "so does Spark's JVM"

    if to_group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired as hang:
        for pid in [process.pid, *helpers]:  # not left running beside the rest of the suite
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"still running 60 s after {signum.name}:\n{(hang.stderr or b'')[-3000:]!r}")
    assert process.returncode == 130, err[-3000:]
    assert "lockgate run: interrupted" in err
    assert "could not revoke" not in err, "etcd outlives the run's cleanup: " + err[-3000:]
    assert run_record(tmp_path) is None, "the run's record is removed with it"
    left = [f"{pid} {command}" for pid, (_, command) in helpers.items() if _alive(pid)]
    assert left == [], "processes left behind"
    assert os.path.isdir(tmp_path / ".lockgate" / "etcd"), "etcd's data stays, for the next run"


def _leftovers(directory: Path) -> list[str]:
    """What the run started and is still running: its processes work in `directory`,
    whoever their parent is now (one whose parent ended is reparented to 1)."""
    return [process for process in working_in(directory) if not process.startswith(f"{os.getpid()} ")]


_UNBOUNDED_SUM = ("--arg", "count=unbounded", "--arg", "rate=2000", "--arg")


@pytest.mark.parametrize("delay_s", [0.5, 1.0, 1.5, 2.0])
def test_ctrl_c_while_the_run_starts_exits_130_with_one_line_and_leaves_no_process(
    tmp_path: Path, delay_s: float
) -> None:
    """Ctrl-C lands while Python imports, while etcd and Spark's JVM start, or as the job
    launches, whichever the machine's load makes it: the run exits 130 with its one-line
    message, no traceback, and nothing it started is left running (once a JVM was left
    with parent 1, and an interrupt during the imports exited -2 with a traceback)."""
    out = f"file://{tmp_path}/out"
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:  # a file: a process left behind would hold a pipe open
        process = subprocess.Popen(
            [
                LOCKGATE,
                "run",
                "tests.jobs.configurable:running_sum",
                "-p",
                "2",
                *_UNBOUNDED_SUM,
                f"output={out}",
            ],
            cwd=tmp_path,
            env=environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            process_group=0,
        )
    time.sleep(delay_s)  # the moment of the interrupt is what this test varies
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
    try:
        process.wait(timeout=240)  # a first run on a loaded machine writes the class cache first
    finally:
        left = _leftovers(tmp_path)
        for line in left:  # not left running beside the rest of the suite
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    err = errors.read_text()
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "lockgate run: interrupted", err[-3000:]
    assert left == [], "processes left behind"


def test_an_interrupt_that_lands_while_python_creates_a_class_counts_as_an_interrupt() -> None:
    """Ctrl-C during the imports can land in a class's creation, where Python reports
    it as `RuntimeError: Error calling __set_name__` caused by the KeyboardInterrupt:
    the command answers it with its one line and 130 all the same (it exited 1 with a
    traceback; seen in the test above at 0.5 s)."""

    def created_while_interrupted() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError(
                "Error calling __set_name__ on 'Field' instance 'secret' in 'JobSpec'"
            ) from interrupt

    with pytest.raises(RuntimeError) as caught:
        created_while_interrupted()
    assert interrupted(caught.value)
    assert interrupted(KeyboardInterrupt())
    assert not interrupted(RuntimeError("no"))
    assert not interrupted(SystemExit(2))
