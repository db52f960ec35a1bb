"""The rate gauges: per second over the last window, whatever the scrape interval."""

from __future__ import annotations

import pytest
from lockgate.runtime.metrics.rates import WindowedRates


def test_a_rate_spans_the_window_however_often_it_is_scraped() -> None:
    now = [100.0]
    rates = WindowedRates(lambda: now[0], started_s=100.0, window_s=10.0)
    now[0] = 102.0
    assert rates.rates({"in": 200}) == {"in": 100.0}, "before the window fills: since the start"
    for second in range(3, 31):  # a scrape a second, 100 records a second, then 300 from 20 s on
        now[0] = 100.0 + second
        count = 100 * second if second <= 20 else 2000 + 300 * (second - 20)
        latest = rates.rates({"in": count})
    assert latest == {"in": pytest.approx(300.0)}, "the last 10 s only"
    now[0] = 131.0
    many = [rates.rates({"in": 5300}) for _ in range(5)]  # several scrapers at once
    assert many[-1] == {"in": pytest.approx(300.0)}, "scrapes in a burst do not shorten the window"


def test_a_counter_that_appears_later_counts_from_zero() -> None:
    now = [0.0]
    rates = WindowedRates(lambda: now[0], started_s=0.0, window_s=10.0)
    now[0] = 5.0
    rates.rates({"a": 50})
    now[0] = 20.0
    assert rates.rates({"a": 200, "b": 150}) == {"a": pytest.approx(10.0), "b": pytest.approx(10.0)}
