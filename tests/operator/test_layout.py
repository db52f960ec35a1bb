"""`operator/` is `lockgate.operator`, never the top-level `operator` of the
standard library: with an `__init__.py` there, any Python started in the
repository's root would import it instead of the stdlib's, and break."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_python_in_the_repository_root_still_gets_the_stdlib_operator() -> None:
    assert not (REPO / "operator" / "__init__.py").exists()
    probe = subprocess.run(
        [sys.executable, "-c", "import operator, lockgate.operator.spec; print(operator.eq(1, 1))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.stdout.strip() == "True", probe.stderr
