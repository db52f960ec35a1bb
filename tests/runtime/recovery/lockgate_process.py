"""`lockgate` commands run as a user runs them, in a directory of their own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys

T = TypeVar("T")

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
REPO = Path(__file__).resolve().parents[3]


def fixed_delay_restarts(attempts: int) -> tuple[str, ...]:
    """The `lockgate run` flags of a run that restarts up to `attempts` times, 0.5 s apart."""
    return (
        "--restart-strategy",
        "fixed-delay",
        "--restart-attempts",
        str(attempts),
        "--restart-delay",
        "0.5",
    )


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def start(
    cwd: Path,
    *args: str,
    own_group: bool = False,
    env: dict[str, str] | None = None,
    stderr_to: Path | None = None,
) -> subprocess.Popen[str]:
    """`own_group`: the run leads a process group, as a command started from a shell
    does; `env`: variables added to the run's environment; `stderr_to`: a file for
    what the run logs (with -v, more than a pipe nobody reads holds)."""
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(stderr_to.open("w")) if stderr_to is not None else subprocess.PIPE
        return subprocess.Popen(
            [LOCKGATE, *args],
            cwd=cwd,
            env={**environment(), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            process_group=0 if own_group else None,
        )


def run(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_command(cwd, [LOCKGATE, *args], timeout)


def run_command(cwd: Path, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`command` to its end with the repository importable; its output captured. A
    run still going after `timeout` is killed, and the test fails with the end of
    what it logged (subprocess's own error shows only its first lines)."""
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            env=environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        logged = expired.stderr or b""
        text = logged.decode(errors="replace") if isinstance(logged, bytes) else logged
        lines = [line for line in text.splitlines() if not line.startswith("%")]  # librdkafka's own
        raise AssertionError(
            f"{' '.join(command[1:3])} still ran after {timeout:g} s and was killed; its log ends:\n"
            + "\n".join(lines[-60:])
        ) from None


def wait_for(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[str], timeout: float = 120
) -> None:
    """Poll `condition` until it holds; fail early, with the run's output, if the run ended."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(
                f"the run ended (exit {process.returncode}) before {what}:\n{out}\n{(err or '')[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.1)  # polling interval of the condition, not a synchronisation by itself


def committed_count(url: str) -> int:
    try:
        return len(read_committed(url))
    except FileNotFoundError:
        return 0


def run_record(cwd: Path) -> dict[str, Any] | None:
    path = cwd / ".lockgate" / "run.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def finish(process: subprocess.Popen[str], timeout: float = 180) -> tuple[str, str]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit {process.returncode}:\n{out}\n{(err or '')[-4000:]}"
    return out, err or ""


def ask_run_etcd(cwd: Path, question: Callable[[Etcd], Awaitable[T]], before_start: T) -> T:
    """`question` answered by the embedded etcd of the run in `cwd`; `before_start`
    while it has none."""
    record = run_record(cwd)
    if record is None:
        return before_start

    async def ask() -> T:
        async with Etcd(EtcdConfig.from_url(record["etcd"])) as etcd:
            return await question(etcd)

    return asyncio.run(ask())


def restarts(cwd: Path, keys: JobKeys) -> int:
    """The restarts so far of the run in `cwd`, as its status heartbeat reports them."""

    async def ask(etcd: Etcd) -> int:
        status = await read_status(etcd, keys)
        return 0 if status is None else status.restarts

    return ask_run_etcd(cwd, ask, 0)
