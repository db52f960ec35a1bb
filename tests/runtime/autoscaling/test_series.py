"""What a window of samples says, and when it cannot say it."""

from __future__ import annotations

import pytest
from lockgate.runtime.autoscaling.series import IncompleteMetricsError, LoadSample, SubtaskLoad, measure


def sample(
    at_s: float, records: int, busy_s: float, *, backlog: int | None = 0, chains: int = 2
) -> LoadSample:
    subtasks = [SubtaskLoad("source", 0, records, busy_s / 10, 0.0, True, backlog)]
    if chains == 2:
        subtasks.append(SubtaskLoad("keyed", 0, records, busy_s))
    return LoadSample(at_s, 1, tuple(subtasks))


def test_rates_come_from_the_newest_sample_and_the_newest_a_window_before() -> None:
    series = [
        sample(0, 0, 0.0, backlog=0),
        sample(10, 1000, 2.0, backlog=500),
        sample(70, 7000, 14.0, backlog=2000),
    ]
    load = measure(series, parallelism=1, since_s=0, window_s=60, now_s=70)
    assert (load.start_s, load.end_s) == (10, 70)
    keyed = next(c for c in load.chains if c.vertex == "keyed")
    assert keyed.records_per_s == pytest.approx(100.0)
    assert keyed.true_rate == pytest.approx(500.0), "6000 records in 12 busy seconds"
    assert keyed.busy == pytest.approx(0.2)
    assert load.read_rate == pytest.approx(100.0)
    assert load.backlog == 2000
    assert load.input_rate == pytest.approx(125.0), "read 100/s, and 25/s more piled up"


@pytest.mark.parametrize(
    ("series", "now_s", "reason"),
    [
        ([sample(0, 0, 0.0), sample(60, 6000, 12.0)], 200, "the newest metrics are 140 s old"),
        ([sample(0, 5000, 10.0), sample(60, 100, 0.2)], 60, "the counters of keyed/0 went back"),
        ([sample(0, 0, 0.0), sample(60, 6000, 12.0, chains=1)], 60, "no metrics of keyed/0 at 60 s"),
        ([sample(30, 0, 0.0), sample(60, 6000, 12.0)], 60, "cover 30 s of the 60 s window"),
    ],
    ids=["stale", "restarted", "a chain gone", "short"],
)
def test_incomplete_metrics_say_what_is_missing(series: list[LoadSample], now_s: float, reason: str) -> None:
    with pytest.raises(IncompleteMetricsError, match=reason):
        measure(series, parallelism=1, since_s=0, window_s=60, now_s=now_s)


def test_a_source_that_cannot_tell_its_backlog_is_named() -> None:
    series = [sample(0, 0, 0.0, backlog=None), sample(60, 6000, 12.0, backlog=None)]
    load = measure(series, parallelism=1, since_s=0, window_s=60, now_s=60)
    assert load.backlog is None
    assert load.unknown_backlog == ("source/0",)
    assert load.input_rate == pytest.approx(100.0), "the read rate alone"
