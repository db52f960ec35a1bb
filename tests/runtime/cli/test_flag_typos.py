"""A mistyped flag is refused by the command it was given to, naming the flag it
most likely meant; an abbreviation is never taken for a flag."""

from __future__ import annotations

import pytest
from lockgate.runtime.cli import main
from lockgate.runtime.cli.run import local_task_limit


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "usage", "says"),
    [
        (["run", "jobs:build", "--paralelism", "2"], "usage: lockgate run ", "(did you mean --parallelism?)"),
        (["run", "jobs:build", "--bound"], "usage: lockgate run ", "--bound (did you mean --bounded?)"),
        (["savepoint", "words", "--stp"], "usage: lockgate savepoint ", "(did you mean --stop?)"),
        (
            ["checkpoints", "list", "words", "--etc", "x"],
            "usage: lockgate checkpoints list ",
            "(did you mean --etcd?)",
        ),
    ],
)
def test_a_mistyped_flag_names_the_one_it_likely_meant_under_its_commands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, says: str
) -> None:
    said = _refusal(capsys, *argv)
    assert said.startswith(usage), said
    assert "unrecognized arguments: " in said
    assert says in said


def test_an_abbreviated_flag_is_not_taken_for_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    said = _refusal(capsys, "run", "jobs:build", "--max-par", "4")
    assert "unrecognized arguments: --max-par 4 (did you mean --max-parallelism?)" in said


def test_a_word_nothing_resembles_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    said = _refusal(capsys, "run", "jobs:build", "--zzzz")
    assert said.rstrip().endswith("unrecognized arguments: --zzzz"), said


@pytest.mark.parametrize("local", [[], ["--local"]])
def test_more_tasks_than_this_machine_runs_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], local: list[str]
) -> None:
    assert main(["run", "tests.jobs.configurable:word_count", "-p", "5000", *local]) == 2
    said = capsys.readouterr().err
    assert "lockgate run: parallelism 5000 is more tasks than this machine runs" in said
    assert f"run with -p {local_task_limit()} or fewer, or on a cluster" in said
