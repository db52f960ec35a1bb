"""Commands that find their etcd through the `lockgate run` of the current directory
say which case they are in: no run was ever here, or the run here has ended."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime.cli import main


def _said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCKGATE_ETCD", raising=False)
    assert main(["savepoint", "words"]) == 1
    return capsys.readouterr().err


def test_with_no_run_here_it_names_the_ways_to_find_an_etcd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = _said(tmp_path, monkeypatch, capsys)
    assert "no etcd given: pass --etcd http://host:port" in said


def test_after_a_run_here_ended_it_says_so_and_how_to_continue_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".lockgate" / "etcd").mkdir(parents=True)  # what an ended run leaves
    said = _said(tmp_path, monkeypatch, capsys)
    assert "the `lockgate run` of this directory is not running (it finished or was stopped)" in said
    assert "--resume" in said
    assert "run this in the directory of a `lockgate run`" not in said
