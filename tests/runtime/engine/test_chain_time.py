"""A chain's busy time: what is left of its elapsed time once the waits are out,
a counter that never goes back; and the records in it is set against."""

from __future__ import annotations

from typing import Any

from lockgate.runtime.engine.chain_time import ChainTime
from lockgate.runtime.engine.events import Barrier, EventTime
from lockgate.runtime.engine.operators import Counted


def test_busy_time_is_elapsed_less_idle_and_backpressured() -> None:
    now = [100.0]
    time = ChainTime(lambda: now[0])
    assert time.busy_s(0.0) == 0.0, "not started"
    time.start()
    now[0] = 101.0
    waited = time.now()
    now[0] = 103.0
    time.waited_since(waited)  # 2 s idle
    now[0] = 110.0
    assert time.busy_s(backpressured_s=3.0) == 5.0, "10 s: 2 idle, 3 waiting for credit"
    time.stop()
    now[0] = 200.0
    assert time.elapsed_s() == 10.0, "stopped: time no longer runs"


def test_a_wait_counted_late_does_not_take_busy_time_back() -> None:
    now = [0.0]
    time = ChainTime(lambda: now[0])
    time.start()
    now[0] = 10.0
    assert time.busy_s(0.0) == 10.0, "a send blocked since 4 s is not counted yet"
    assert time.busy_s(backpressured_s=6.0) == 10.0, "the counter holds instead of going back"
    now[0] = 20.0
    assert time.busy_s(backpressured_s=6.0) == 14.0


class _Slow:
    """An operator at work on a batch: what the records-in counter said meanwhile."""

    def __init__(self) -> None:
        self.counted: Counted | None = None
        self.seen_while_working: list[int] = []

    def push(self, records: list[Any], timestamps: list[int | None] | None = None) -> None:
        assert self.counted is not None
        self.seen_while_working.append(self.counted.count)

    def barrier(self, barrier: Barrier) -> None:
        pass

    def event_time(self, mark: EventTime) -> None:
        pass

    def end(self) -> None:
        pass

    def flush(self) -> None:
        pass


def test_records_in_are_counted_once_processed_not_while_their_busy_time_runs() -> None:
    """A batch of 40 at 50 ms a record is 2 s of work: counted on arrival, a window
    ending within it reads up to 40 records more than its busy time processed."""
    operator = _Slow()
    counted = operator.counted = Counted(operator)
    counted.push(list(range(40)))
    counted.push(list(range(8)))
    assert operator.seen_while_working == [0, 40]
    assert counted.count == 48
