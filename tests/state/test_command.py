"""`lockgate state ls|show|export`: a snapshot's state from the command line; bad
input refused in one line, exit status 2, before Spark starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime.cli import main
from lockgate.runtime.snapshot.snapshot_key import new_key_text

from tests.state.test_read import stopped, write_savepoint

LOCKGATE = str(Path(sys.executable).parent / "lockgate")


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    saved, read = stopped("rocksdb", parallelism=2)
    return write_savepoint(saved, tmp_path_factory.mktemp("savepoint")), read


def test_ls_lists_operators_states_and_key_groups(
    savepoint: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = savepoint
    assert main(["state", "ls", url, "--unsigned"]) == 0
    out = capsys.readouterr().out
    assert "kinds  parallelism 2, max parallelism 128" in out
    assert "  subtask 1: key groups 64..127 (canonical)" in out
    assert "  keyed state last: value, ttl" in out
    assert "  keyed state _window.windows: map" in out
    assert "  operator state offsets: union, 1 elements" in out


def test_show_prints_one_key_as_json_lines(
    savepoint: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, read = savepoint
    assert main(["state", "show", url, "kinds", "seen", "--key", "3", "--unsigned"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {"key": 3, "index": i, "value": r["n"]} for i, r in enumerate(r for r in read if r["key"] == 3)
    ]
    assert main(["state", "show", url, "kinds", "total", "--key", "k2", "--unsigned"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "key": "k2",
        "value": sum(r["n"] for r in read if r["key"] == "k2"),
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ls", "file:///nonexistent/where", "--unsigned"], "is no savepoint or checkpoint"),
        (["show", "{url}", "nope", "count", "--unsigned"], "holds no operator 'nope'"),
        (["show", "{url}", "kinds", "nope", "--unsigned"], "has no state 'nope'"),
        (["ls", "{url}", "--snapshot-key-file", "{key}"], "is not signed"),
        (["ls", "{url}"], "no snapshot key for job default/every-kind"),
        (
            ["export", "{url}", "kinds", "nope", "--format", "jsonl", "--output", "file:///x", "--unsigned"],
            "has no state 'nope'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    savepoint: tuple[str, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # no .lockgate/keys here
    key = tmp_path / "job.key"
    key.write_text(new_key_text())
    filled = [a.format(url=savepoint[0], key=key) for a in argv]
    assert main(["state", *filled]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("lockgate state: ")
    assert message in err


def test_the_command_line_lists_state_without_importing_its_readers() -> None:
    """Every `lockgate run` builds the parser: `lockgate state` must cost it nothing
    but its options."""
    probe = (
        "import sys; from lockgate.runtime.cli import parser; "
        "commands = parser()._subparsers._group_actions[0].choices; print('state' in commands); "
        "print(sorted(m for m in sys.modules if m.startswith('lockgate.state')))"
    )
    listed, imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert listed == "True"
    assert imported == "['lockgate.state', 'lockgate.state.command']"
