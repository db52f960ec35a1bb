"""Demo: fault tolerance and rescaling, as a user lives them.

1. `lockgate run examples.sums:build -p 2` — a keyed running sum on Spark, in
   its own directory (embedded etcd, local checkpoints), paced so it takes a
   while;
2. a Python worker running one of its tasks is killed with SIGKILL mid-stream;
   the driver restarts the job from the latest checkpoint;
3. `lockgate savepoint sums --stop` stops it with a savepoint;
4. `lockgate run … -p 3 --from-savepoint PATH --bounded` resumes at
   parallelism 3 and finishes the stream;
5. the committed output is checked: every record exactly once, every key's
   running sum intact.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from lockgate.runtime import read_committed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.sums import check  # noqa: E402
from tests.process_tree import python_task_workers  # noqa: E402 - after the path that makes it importable

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
COUNT, KEYS, RATE = 60_000, 50, 3000


def say(text: str) -> None:
    print(f"\n\033[1m[demo] {text}\033[0m" if sys.stdout.isatty() else f"\n[demo] {text}", flush=True)


def _forward(stream: IO[str], keep: Callable[[str], bool]) -> None:
    for line in stream:
        if keep(line):
            print("    " + line.rstrip(), flush=True)


def _is_lockgate_line(line: str) -> bool:
    # Progress lines and lockgate's own messages; not Spark's JVM log chatter.
    return " | read " in line or line.startswith(
        ("running ", "finished", "stopped", "WARNING lockgate", "/", "file:")
    )


def lockgate(work: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [LOCKGATE, *args], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for stream in (process.stdout, process.stderr):
        assert stream is not None
        threading.Thread(target=_forward, args=(stream, _is_lockgate_line), daemon=True).start()
    return process


def committed(out: str) -> int:
    try:
        return len(read_committed(out))
    except FileNotFoundError:
        return 0


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 180
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"[demo] gave up waiting for {what} (run exit code {process.poll()})")
        time.sleep(0.2)  # how often the demo looks; the job does not wait on it


def job(out: str, parallelism: int, *flags: str) -> list[str]:
    args = [f"count={COUNT}", f"keys={KEYS}", f"rate={RATE}", f"output={out}"]
    return [
        "run",
        "examples.sums:build",
        "--job-id",
        "sums",
        "-p",
        str(parallelism),
        "--checkpoint-interval",
        "1",
        *[x for a in args for x in ("--arg", a)],
        *flags,
    ]


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lockgate-recovery-"))
    out = f"file://{work}/out"
    try:
        say(f"a keyed running sum of {COUNT:,} records at {RATE:,}/s, parallelism 2, on Spark local[2]")
        run = lockgate(work, *job(out, 2))
        wait_until(lambda: committed(out) > 0, run, "the first committed output")
        wait_until(lambda: bool(python_task_workers(run.pid)), run, "a task's Python worker")
        victim = python_task_workers(run.pid)[0]
        before = committed(out)
        say(f"{before:,} records committed; killing Python worker {victim} with SIGKILL")
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: committed(out) > before, run, "committed output after the restart")
        say(f"recovered from the latest checkpoint: {committed(out):,} records committed, and counting")

        say("lockgate savepoint sums --stop")
        savepoint = (
            subprocess.run(
                [LOCKGATE, "savepoint", "sums", "--stop"],
                cwd=work,
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        run.wait(timeout=120)
        say(f"stopped (exit {run.returncode}), savepoint {savepoint}; {committed(out):,} records committed")

        say("resuming from the savepoint at parallelism 3, to the end of the stream")
        resumed = lockgate(work, *job(out, 3, "--from-savepoint", savepoint, "--bounded"))
        resumed.wait(timeout=300)
        if run.returncode != 0 or resumed.returncode != 0:
            say(f"a run failed (exit codes {run.returncode}, {resumed.returncode})")
            return 1

        problem = check(read_committed(out), COUNT, KEYS)
        if problem is not None:
            say(f"output is NOT exactly once: {problem}")
            return 1
        say(f"{COUNT:,} records, each committed exactly once, every key's sum intact: OK")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
