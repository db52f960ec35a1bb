"""`lockgate.testing.Watermark`: a test states a source's watermarks at their place
in its records, and reads from the result how many records each window vertex
dropped as late."""

from __future__ import annotations

from typing import Any

import pytest
from lockgate.testing import Watermark, run_job

from tests.testing import jobs


def click(user: str, ts: int) -> dict[str, Any]:
    return {"user": user, "ts": ts}


def test_a_record_behind_a_stated_watermark_is_dropped_and_counted() -> None:
    clicks = [click("a", 0), click("a", 30_000), click("a", 61_000), Watermark(60_000), click("a", 5_000)]
    result = run_job(jobs.clicks_per_minute, sources={"clicks": clicks})
    # The first minute fired at the mark, before the record of 5 s came: that one is dropped.
    assert result.outputs["out"] == [("a", 0, 2), ("a", 60_000, 1)]
    assert result.late_records_dropped == {"per-minute": 1}


def test_the_same_record_within_the_allowed_lateness_fires_its_window_again() -> None:
    clicks = [
        click("a", 0),
        click("a", 61_000),
        Watermark(60_000),
        click("a", 5_000),  # 1 ms past the window's end, within 10 s of lateness
        Watermark(69_999),
        click("a", 6_000),  # the lateness ran out at 69 999
    ]
    result = run_job(jobs.clicks_per_minute, args={"lateness": "10"}, sources={"clicks": clicks})
    assert result.outputs["out"] == [("a", 0, 1), ("a", 0, 2), ("a", 60_000, 1)]
    assert result.late_records_dropped == {"per-minute": 1}


def test_marks_of_two_sources_at_parallelism_2_each_hold_their_own_windows() -> None:
    clicks = [click("a", 0), click("b", 1_000), Watermark(60_000), click("a", 2_000), click("b", 70_000)]
    views = [click("a", 0), Watermark(59_999), click("b", 3_000), click("a", 4_000), Watermark(60_000)]
    result = run_job(
        jobs.clicks_and_views_per_minute, parallelism=2, sources={"clicks": clicks, "views": views}
    )
    assert sorted(result.outputs["out"]) == [("a", 0, 1), ("b", 0, 1), ("b", 60_000, 1)]
    assert sorted(result.outputs["views-out"]) == [("a", 0, 1)]
    assert result.late_records_dropped == {"per-minute": 1, "views-per-minute": 2}


def test_a_source_given_no_marks_keeps_its_strategys_watermarks() -> None:
    # An hour of out-of-orderness: nothing is late, the windows fire at the end of input.
    clicks = [click("a", 61_000), click("a", 0)]
    result = run_job(jobs.clicks_per_minute, sources={"clicks": clicks})
    assert sorted(result.outputs["out"]) == [("a", 0, 1), ("a", 60_000, 1)]
    assert result.late_records_dropped == {"per-minute": 0}


def test_a_stop_and_its_restore_each_count_their_own_late_records() -> None:
    clicks = [
        click("a", 0),
        Watermark(60_000),
        click("a", 1_000),  # late in the first run
        click("a", 61_000),
        # The stop: the restored run reads on from here, its watermark started over.
        Watermark(61_000),
        click("a", 3_000),  # late in the restored run
    ]
    first = run_job(jobs.clicks_per_minute, sources={"clicks": clicks}, stop_after_records=3)
    assert first.records_read == 3
    rest = run_job(jobs.clicks_per_minute, sources={"clicks": clicks}, restore=first.savepoint)
    assert first.late_records_dropped == {"per-minute": 1}
    assert rest.late_records_dropped == {"per-minute": 1}
    assert first.outputs["out"] + rest.outputs["out"] == [("a", 0, 1), ("a", 60_000, 1)]


def test_a_mark_that_goes_back_is_refused_naming_the_source_and_both_marks() -> None:
    clicks = [click("a", 0), Watermark(60_000), click("a", 1), Watermark(59_000)]
    with pytest.raises(TypeError) as refused:
        run_job(jobs.clicks_per_minute, sources={"clicks": clicks})
    message = str(refused.value)
    assert "sources['clicks'][3] = Watermark(timestamp_ms=59000)" in message
    assert "sources['clicks'][1] = Watermark(timestamp_ms=60000)" in message


def test_marks_for_a_source_without_event_time_are_refused_naming_it() -> None:
    with pytest.raises(TypeError, match=r"sources\['numbers'\]\[1\] is a Watermark, but source 'numbers' is"):
        run_job(jobs.numbers_without_event_time, sources={"numbers": [1, Watermark(5), 2]})


def test_a_mark_takes_an_int_of_milliseconds() -> None:
    with pytest.raises(TypeError, match="Watermark takes an int of milliseconds since the epoch, got '5'"):
        Watermark("5")  # type: ignore[arg-type]
