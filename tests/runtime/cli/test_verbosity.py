"""-v, -vv, --log-level and --debug: the level of the command's logs and its tasks'."""

from __future__ import annotations

import logging
import os

import pytest
from lockgate.runtime.cli import parser, verbosity


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ([], "WARNING"),
        (["-v"], "INFO"),
        (["-vv"], "DEBUG"),
        (["--debug"], "DEBUG"),
        (["--log-level", "error"], "ERROR"),
        (["--debug", "--log-level", "INFO"], "INFO"),
    ],
)
def test_the_level_reaches_this_process_and_the_tasks_it_starts(
    flags: list[str], level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(verbosity.LOG_LEVEL_ENV, raising=False)
    root = logging.getLogger()
    handlers, previous = list(root.handlers), root.level
    try:
        verbosity.configure(parser().parse_args(["checkpoints", "list", "job", *flags]))
        assert logging.getLevelName(root.level) == level
        assert os.environ[verbosity.LOG_LEVEL_ENV] == level
    finally:
        root.handlers[:] = handlers
        root.setLevel(previous)


def test_every_command_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["run", "x:y"], ["savepoint", "job"], ["checkpoints", "show", "job"]):
        assert parser().parse_args([*command, "-v", "--debug"]).debug
    with pytest.raises(SystemExit):
        parser().parse_args(["checkpoints", "list", "job", "--log-level", "loud"])
    assert "argument --log-level: invalid choice: 'LOUD'" in capsys.readouterr().err
