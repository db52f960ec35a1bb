"""A FileSink file's name says whose it is, one way only."""

from __future__ import annotations

import pytest
from lockgate.runtime import JobIdentity
from lockgate.runtime.connectors.sink_file_names import FileName, parse_hidden


@pytest.mark.parametrize(
    "name",
    [
        FileName("part", JobIdentity("default", "job-a"), 0, 1, "0123abcd", 0),
        FileName("out-put.x", JobIdentity("ns.b-c", "a-1_2.3"), 17, 4012, "ffffffff", 99),
    ],
)
def test_a_hidden_name_parses_back_to_its_parts(name: FileName) -> None:
    assert parse_hidden(name.in_progress) == name
    assert parse_hidden(name.pending) == name


@pytest.mark.parametrize(
    "name",
    [
        "part~default~job-a~0-1-0123abcd-0-chk3.jsonl",  # committed, visible
        ".part-0-0123abcd-0.inprogress",  # no job in it
        ".part~default~job-a~0-1-0123abcd.inprogress",  # a part missing
        ".a~b~default~job-a~0-1-0123abcd-0.inprogress",  # a part too many
        ".part~default~job-a~0-1-0123abcd-0.pending",  # the wrong mark for its kind
    ],
)
def test_other_names_are_not_a_sinks_hidden_files(name: str) -> None:
    assert parse_hidden(name) is None


def test_final_names_of_two_jobs_differ_even_when_every_number_is_the_same() -> None:
    finals = {
        FileName(prefix, JobIdentity(namespace, job), 0, 1, "0123abcd", 0).final(7)
        for prefix, namespace, job in [
            ("part", "default", "a-b"),
            ("part-a", "default", "b"),
            ("part", "default-a", "b"),
            ("part", "default", "a"),
            ("part", "other", "a-b"),
        ]
    }
    assert len(finals) == 5
