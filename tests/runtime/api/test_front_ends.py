"""Errors that name a setting of the run keep it as fields and render it for the
front end they are addressed to: `lockgate run`'s flags (and manifest fields), or
`run_job`'s arguments."""

from __future__ import annotations

import pickle

import pytest
from lockgate.runtime.api.front_ends import COMMAND_LINE, RUN_JOB, FrontEndError, address_to
from lockgate.runtime.api.job_args import JobArgumentError, MissingJobArgumentError
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError, NonRestoredStateError

URL = "file:///sp/savepoint-1"


def test_a_restore_refusal_names_the_allowing_setting_as_each_front_end_gives_it() -> None:
    error = NonRestoredStateError(URL, ["'sum' (keyed state)"], ["'total' (process)"])
    cli, run_job = error.render(COMMAND_LINE), error.render(RUN_JOB)
    assert cli.startswith(f"{URL} holds state no vertex of this job claims: 'sum' (keyed state). ")
    assert cli.endswith(
        "pass --allow-non-restored-state (spec.job.allowNonRestoredState: true) to drop the unclaimed state."
    )
    assert run_job.startswith("the savepoint given as restore= holds state no vertex of this job claims")
    assert run_job.endswith("pass allow_non_restored_state=True to drop the unclaimed state.")
    assert str(error) == cli, "addressed to the command line unless a front end says otherwise"
    address_to(error, RUN_JOB)
    assert str(error) == run_job


@pytest.mark.parametrize(
    ("error", "cli", "run_job"),
    [
        (
            MaxParallelismMismatchError(URL, "sum", 128, 64, None),
            f"{URL} was taken with max parallelism 128 (vertex 'sum'); this run has 64. Run with "
            "--max-parallelism 128: it is fixed for the life of a job's state.",
            "the savepoint given as restore= was taken with max parallelism 128 (vertex 'sum'); this run has "
            "64. Run with max_parallelism=128: it is fixed for the life of a job's state.",
        ),
        (
            MissingJobArgumentError("output", ["input"]),
            "job argument 'output' is missing: give it with --arg output=VALUE (or in the manifest's "
            "spec.job.args); given: input",
            "job argument 'output' is missing: give it in run_job(args={'output': ...}); given: input",
        ),
        (
            JobArgumentError("count", "abc", "an integer"),
            "job argument count='abc' is not an integer: give it with --arg count=...",
            "job argument count='abc' is not an integer: give it with run_job(args={'count': ...})",
        ),
    ],
)
def test_each_front_end_renders_its_own_words(error: FrontEndError, cli: str, run_job: str) -> None:
    assert (error.render(COMMAND_LINE), error.render(RUN_JOB)) == (cli, run_job)


def test_an_error_crosses_processes_with_its_fields_and_its_front_end() -> None:
    error = MissingJobArgumentError("output", ["input"])
    error.asked_in = "build, job.py line 3"
    address_to(error, RUN_JOB)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.key, copy.given, copy.front_end) == ("output", ["input"], RUN_JOB)
    assert str(copy) == str(error)
    assert str(copy).endswith("(asked for in build, job.py line 3)")
