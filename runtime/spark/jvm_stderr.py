"""Spark's driver JVM inherits this process's standard error when pyspark starts it,
and prints there, before any logging is configured, lines a job's author can do
nothing about: Java's own "WARNING: Using incubator modules: jdk.incubator.vector"
(Spark's launcher always adds that module; Java has no switch to keep quiet about
it) and Spark's note on the shell's log level. `sifted_stderr` hands the JVM a pipe
as its standard error while it starts, and a thread copies every line from it to
the real standard error but those: the JVM keeps the pipe for its whole life, so
its later errors still show, in order."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

NOISE = (
    b"WARNING: Using incubator modules: ",
    b'Setting default log level to "',
    b"To adjust logging level use sc.setLogLevel(newLevel).",
)


@contextlib.contextmanager
def sifted_stderr(noise: tuple[bytes, ...] = NOISE) -> Iterator[threading.Thread]:
    """While inside, file descriptor 2 is a pipe whose lines, but those starting with
    one of `noise`, go on to the real standard error; a process started inside
    keeps the pipe (and the sifting) after. Yields the thread that copies: joined,
    once the processes started inside have exited, everything they wrote is out."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    real = os.dup(2)
    copier = threading.Thread(
        target=_copy, args=(read_end, real, noise), name="lockgate-jvm-stderr", daemon=True
    )
    copier.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield copier
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # this process writes to the real one again; the pipe's writers are others


def _copy(read_end: int, real: int, noise: tuple[bytes, ...]) -> None:
    """Until every writer of the pipe is gone (the JVM and its Python workers exited)."""
    pending = b""
    try:
        while chunk := os.read(read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not line.startswith(noise))
            if kept:
                os.write(real, kept)
        if pending and not pending.startswith(noise):
            os.write(real, pending)
    finally:
        os.close(read_end)
        os.close(real)
