"""The list of slow tests names what exists: a renamed file would quietly leave
the quick loop (`pytest -m "not slow"`) slow."""

from __future__ import annotations

from pathlib import Path

from conftest import SLOW

REPO = Path(__file__).resolve().parents[1]


def test_every_path_marked_slow_exists() -> None:
    missing = [path for path in SLOW if not (REPO / path).exists()]
    assert missing == []
