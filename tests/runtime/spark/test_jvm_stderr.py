"""The driver JVM's standard error is sifted: Java's and Spark's start-up notes are
dropped, everything else it writes, then or later, reaches the user in order.
The test program writes each of its own lines in one call: print's text and its
newline are two writes, between which the copier's lines may land."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import os, subprocess
    from lockgate.runtime.spark.jvm_stderr import sifted_stderr

    with sifted_stderr() as copier:
        child = subprocess.Popen(["sh", "-c", '''
            echo "WARNING: Using incubator modules: jdk.incubator.vector" >&2
            echo 'Setting default log level to "WARN".' >&2
            echo "an error of its own" >&2
            sleep 0.2
            echo "a later error, after the start" >&2
            printf "no newline at the end" >&2
        '''])
        os.write(2, b"this process, while sifting\\n")
    os.write(2, b"this process, after\\n")
    child.wait()
    copier.join(10)
    assert not copier.is_alive(), "the child's exit ends the copying"
    """
)


def test_the_jvms_start_up_notes_are_dropped_and_everything_else_kept() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    lines = run.stderr.splitlines()
    assert "WARNING: Using incubator modules: jdk.incubator.vector" not in lines
    assert not any(line.startswith("Setting default log level") for line in lines)
    kept = [line for line in lines if not line.startswith("this process")]
    assert kept == ["an error of its own", "a later error, after the start", "no newline at the end"]
    assert "this process, while sifting" in lines
    assert "this process, after" in lines
