"""The unit test of spend_alerts.py, as its author writes it: the job runs in this
process (no Spark, no etcd) with the payments given here, in milliseconds."""

from __future__ import annotations

from lockgate.testing import ManualClock, run_job
from spend_alerts import FORGET_AFTER, build

# The job's source and sink are replaced by the test's records and collected outputs.
ARGS = {"input": "file:///not/read", "output": "file:///not/written", "limit": "100"}
PAYMENTS = [
    {"card": "visa-1", "amount": 60},
    {"card": "amex-2", "amount": 30},
    {"card": "visa-1", "amount": 50},
    {"card": "amex-2", "amount": 20},
]


def test_a_card_past_its_limit_is_alerted_on() -> None:
    result = run_job(build, parallelism=2, args=ARGS, sources={"payments": PAYMENTS})

    assert sorted(result.outputs["alerts"], key=lambda r: (r["card"], r["spend"])) == [
        {"card": "amex-2", "spend": 30, "alert": False},
        {"card": "amex-2", "spend": 50, "alert": False},
        {"card": "visa-1", "spend": 60, "alert": False},
        {"card": "visa-1", "spend": 110, "alert": True},
    ]


def test_a_stop_and_a_resume_at_another_parallelism_neither_lose_nor_repeat_a_payment() -> None:
    first = run_job(build, parallelism=2, args=ARGS, sources={"payments": PAYMENTS}, stop_after_records=2)
    rest = run_job(build, parallelism=3, args=ARGS, sources={"payments": PAYMENTS}, restore=first.savepoint)

    assert len(first.outputs["alerts"]) == 2
    assert sorted(r["spend"] for r in first.outputs["alerts"] + rest.outputs["alerts"]) == [30, 50, 60, 110]


def test_a_cards_spend_is_forgotten_an_hour_after_its_last_payment() -> None:
    clock = ManualClock(0)
    first = run_job(build, args=ARGS, sources={"payments": PAYMENTS}, clock=clock, stop_after_records=2)
    clock.advance(int(FORGET_AFTER.total_seconds() * 1000))
    rest = run_job(build, args=ARGS, sources={"payments": PAYMENTS}, clock=clock, restore=first.savepoint)

    assert rest.outputs["alerts"] == [
        {"card": "visa-1", "spend": 50, "alert": False},
        {"card": "amex-2", "spend": 20, "alert": False},
    ]
