"""A chain's busy time: what is left of its elapsed time once the waits are out,
a counter that never goes back."""

from __future__ import annotations

from lockgate.runtime.engine.chain_time import ChainTime


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
