"""The README's demo works: it is what a new user runs first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_state_demo_restores_every_count_at_another_parallelism() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "state_demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK") == 2
    assert "Every count survived the snapshot and the rescale." in result.stdout


def test_wordcount_demo_runs_on_spark_exactly_once() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "wordcount_demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "each count exactly once" in result.stdout
