"""`env.args`: a job's arguments, with errors that name the argument."""

from __future__ import annotations

import pytest
from lockgate.runtime.api.job_args import JobArgs, JobArgumentError, MissingJobArgumentError


def test_a_missing_argument_is_named_with_how_to_give_it_and_is_still_a_key_error() -> None:
    args = JobArgs({"input": "file:///in", "rate": "5"})
    with pytest.raises(KeyError) as caught:
        args["output"]
    assert isinstance(caught.value, MissingJobArgumentError)
    assert str(caught.value) == (
        "job argument 'output' is missing: give it with --arg output=VALUE (or in the manifest's "
        "spec.job.args); given: input, rate"
    )
    assert args.get("output") is None
    assert "output" not in args
    assert dict(args) == {"input": "file:///in", "rate": "5"}


@pytest.mark.parametrize(
    ("read", "value", "expected"),
    [
        (JobArgs.int, "42", 42),
        (JobArgs.float, "2.5", 2.5),
        (JobArgs.bool, "Yes", True),
        (JobArgs.bool, "off", False),
    ],
)
def test_typed_readers_parse_the_value(read, value: str, expected: object) -> None:
    assert read(JobArgs({"k": value}), "k") == expected


@pytest.mark.parametrize(
    ("read", "what"),
    [(JobArgs.int, "an integer"), (JobArgs.float, "a number"), (JobArgs.bool, "true or false")],
)
def test_a_value_of_the_wrong_kind_names_the_argument_and_the_value(read, what: str) -> None:
    with pytest.raises(
        JobArgumentError, match=f"job argument count='abc' is not {what}: give it with --arg count="
    ):
        read(JobArgs({"count": "abc"}), "count")


def test_a_default_stands_in_only_for_a_missing_argument() -> None:
    args = JobArgs({"count": "7"})
    assert args.int("count", 3) == 7
    assert args.int("other", 3) == 3
    with pytest.raises(MissingJobArgumentError, match="job argument 'other' is missing"):
        args.int("other")
