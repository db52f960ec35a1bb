"""The directory lock of `lockgate run` (cli/run_lock.py) against what a directory
may hold: another run's lock, a stale pid, a file or a symlink where the work
directory goes. Each is refused in one line naming what to do, nothing overwritten."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
from pathlib import Path

import pytest
from lockgate.runtime.cli.run_lock import DirectoryInUseError, exclusive_run, run_going_on


def test_a_held_directory_is_refused_naming_the_holder_and_the_directory_not_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / ".lockgate").symlink_to(shared)
    monkeypatch.chdir(tmp_path / "here")
    with exclusive_run(Path(".lockgate")):
        with pytest.raises(DirectoryInUseError) as refused, exclusive_run(Path(".lockgate")):
            pass
        assert f"(pid {os.getpid()}) is running in {tmp_path / 'here'}," in str(refused.value)
    assert (shared / "run.lock").read_text() == "", "a released lock names no pid"


def test_a_pid_of_a_process_that_is_gone_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder writes its pid just after it takes the lock: in between, the file
    holds the pid of a run that has ended, and that pid may be another process's."""
    monkeypatch.chdir(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    with exclusive_run(Path(".lockgate")):
        (tmp_path / ".lockgate" / "run.lock").write_text(str(gone.pid))
        with (
            pytest.raises(DirectoryInUseError, match=r"another `lockgate run` \(pid unknown\)"),
            exclusive_run(Path(".lockgate")),
        ):
            pass


@pytest.mark.parametrize("planted", ["file", "symlink", "directory"])
def test_what_stands_where_the_lock_goes_is_refused_in_one_line_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "precious.txt"
    victim.write_text("precious")
    if planted == "file":
        Path(".lockgate").write_text("not a directory")
    else:
        Path(".lockgate").mkdir()
        lock = Path(".lockgate/run.lock")
        lock.symlink_to(victim) if planted == "symlink" else lock.mkdir()
    with (
        pytest.raises(DirectoryInUseError, match=rf"cannot use {tmp_path}/\.lockgate for this run: "),
        exclusive_run(Path(".lockgate")),
    ):
        pass
    assert victim.read_text() == "precious"


def test_a_look_at_whether_a_run_goes_on_does_not_turn_a_starting_run_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lockgate checkpoints` looks (a shared lock, held for an instant) while a run
    takes the lock: the run waits out the look instead of refusing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".lockgate").mkdir()
    (tmp_path / ".lockgate" / "run.lock").touch()
    looking = open(tmp_path / ".lockgate" / "run.lock")  # noqa: SIM115 - released by the timer
    fcntl.flock(looking, fcntl.LOCK_SH)
    look_ends = threading.Timer(0.05, looking.close)  # a look ending while the run starts
    look_ends.start()
    try:
        with exclusive_run(Path(".lockgate")):
            assert run_going_on(Path(".lockgate"))
    finally:
        look_ends.join()
    assert not run_going_on(Path(".lockgate")), "a run that has ended holds nothing"
