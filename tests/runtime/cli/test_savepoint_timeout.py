"""`lockgate savepoint --timeout`: a wait that cannot be is refused as a bad flag
(exit 2) before etcd is asked anything; once it exited 1, after connecting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LOCKGATE = str(Path(sys.executable).parent / "lockgate")
NOTHING_LISTENS = "http://127.0.0.1:9"  # the discard port: a connection would fail, not hang


@pytest.mark.parametrize("timeout", ["-1", "0", "soon", "nan"])
def test_a_timeout_that_cannot_be_waited_is_refused_with_exit_2(tmp_path: Path, timeout: str) -> None:
    result = subprocess.run(
        [LOCKGATE, "savepoint", "job", "--etcd", NOTHING_LISTENS, "--timeout", timeout],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "argument --timeout: " in result.stderr, result.stderr
    assert repr(timeout) in result.stderr, result.stderr
    assert "etcd" not in result.stderr.splitlines()[-1], "etcd was asked before the flag was checked"
