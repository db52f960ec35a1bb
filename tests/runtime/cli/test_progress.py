"""The progress line of `lockgate run`: rates that are never negative, and what the
run started from."""

from __future__ import annotations

import pytest
from lockgate.runtime.driver.progress import Totals, read_rate, render


@pytest.mark.parametrize(
    ("read", "last", "seconds", "rate"),
    [
        (1_500, 1_000, 1.0, 500.0),
        (300, 1_000, 1.0, 300.0),  # the tasks restarted and count from 0: 300 read since
        (0, 1_000, 2.0, 0.0),
        (1_000, 1_000, 0.0, 0.0),
    ],
)
def test_the_read_rate_is_never_negative_across_a_restart(
    read: int, last: int, seconds: float, rate: float
) -> None:
    assert read_rate(read, last, seconds) == rate


def test_the_line_says_what_the_run_restored() -> None:
    totals = Totals(read=12_345, written=12_000, last_checkpoint="#3 in 20 ms, 0.1 MB")
    restored = render(totals, 1234.4, 7.2, "file:///work/.lockgate/checkpoints/sums/chk-12")
    assert restored == (
        "     7 s | read 12,345 (1,234 rec/s) | written 12,000 | checkpoint #3 in 20 ms, 0.1 MB | from chk-12"
    )
    assert render(totals, 0.0, 1.0, None).endswith("| from empty state")
    assert render(totals, 0.0, 1.0, "s3://b/savepoints/savepoint-ab12/").endswith("| from savepoint-ab12")
