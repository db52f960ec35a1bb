"""One `lockgate run` at a time in a directory. Two would share `.lockgate/`: the
embedded etcd's data directory, whose database lock made the second etcd wait
until its start-up bound ran out ("not healthy after 20 s"), and the run record
by which `lockgate checkpoints` and `savepoint` find the run's etcd."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class DirectoryInUseError(RuntimeError):
    """Another `lockgate run` holds this directory's work directory."""


@contextlib.contextmanager
def exclusive_run(work_dir: Path) -> Iterator[None]:
    """Hold `work_dir` for this process until the block ends. The lock is the
    kernel's (flock): it goes with the process, so a killed run leaves none behind."""
    work_dir.mkdir(exist_ok=True)
    with open(work_dir / "run.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise DirectoryInUseError(
                f"another `lockgate run` (pid {holder}) is running in {work_dir.resolve().parent}, "
                f"with its etcd and run record in {work_dir}/: wait for it to end, stop it "
                f"(Ctrl-C, or kill -TERM {holder}), or start this run from another directory"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        yield
