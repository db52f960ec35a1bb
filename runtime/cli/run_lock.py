"""One `lockgate run` at a time in a directory. Two would share `.lockgate/`: the
embedded etcd's data directory, whose database lock made the second etcd wait
until its start-up bound ran out ("not healthy after 20 s"), and the run record
by which `lockgate checkpoints` and `savepoint` find the run's etcd."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class DirectoryInUseError(RuntimeError):
    """Another `lockgate run` holds this directory's work directory, or it cannot be held."""


@contextlib.contextmanager
def exclusive_run(work_dir: Path) -> Iterator[None]:
    """Hold `work_dir` for this process until the block ends. The lock is the
    kernel's (flock): it goes with the process, so a killed run leaves none behind."""
    where = Path.cwd()
    try:
        work_dir.mkdir(exist_ok=True)
        # Not through a symlink: a planted one would have us write over its target.
        descriptor = os.open(work_dir / "run.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise DirectoryInUseError(f"cannot use {where / work_dir} for this run: {error}") from None
    with open(descriptor, "r+") as lock:
        if not _locked(lock):
            holder = _holder(lock.read().strip())
            raise DirectoryInUseError(
                f"another `lockgate run` ({holder}) is running in {where}, with its etcd and run "
                f"record in {work_dir}/: wait for it to end, stop it (Ctrl-C in its terminal, or "
                "kill -TERM its pid), or start this run from another directory"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)  # a pid read later would name a process that is not the run


def _locked(lock: IO[str]) -> bool:
    """Take the lock; a moment's wait covers `run_going_on`, which holds it shared for
    an instant to look."""
    for attempt in range(LOCK_ATTEMPTS):
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt < LOCK_ATTEMPTS - 1:
                time.sleep(0.02)  # the look ends within microseconds; a run holds it for good
    return False


LOCK_ATTEMPTS = 10


def _holder(recorded: str) -> str:
    """The holder's pid, when it wrote one and that process is alive."""
    if not recorded.isdigit():
        return "pid unknown"
    try:
        os.kill(int(recorded), 0)
    except ProcessLookupError:
        return "pid unknown"
    except PermissionError:
        pass  # alive, another user's
    return f"pid {recorded}"


def run_going_on(work_dir: Path) -> bool:
    """Whether a `lockgate run` holds `work_dir` now: its lock is the kernel's, so a
    run that was killed holds none, whatever record it left behind."""
    try:
        descriptor = os.open(work_dir / "run.lock", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with open(descriptor) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False
