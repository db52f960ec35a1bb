"""Barrier alignment: a fast input is held back until the slow one's barrier arrives."""

from __future__ import annotations

from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.engine.alignment import InputGate
from lockgate.runtime.engine.channels import LocalChannel
from lockgate.runtime.engine.events import Barrier, EndOfStream


def _barrier(n: int) -> Barrier:
    return Barrier(Trigger(n, 1, "checkpoint", f"file:///chk-{n}", 0, False))


def _drain(gate: InputGate) -> list[object]:
    out = []
    while (item := gate.poll()) is not None:
        out.append(item)
    return out


def test_exactly_once_holds_back_the_fast_input_until_the_slow_one_catches_up() -> None:
    fast, slow = LocalChannel(64), LocalChannel(64)
    gate = InputGate([fast, slow], "exactly-once")
    fast.send(["f1"])
    fast.send(_barrier(1))
    fast.send(["f2-after-barrier"])
    slow.send(["s1"])
    assert _drain(gate) == [["f1"], ["s1"]], "records after the fast input's barrier wait"
    assert gate.blocked_channels == 1
    assert len(fast) == 1, "they stay queued in the channel, backpressuring its producer"

    slow.send(["s2"])  # the slow input catches up...
    slow.send(_barrier(1))  # ...and delivers its barrier
    assert _drain(gate) == [["s2"], _barrier(1), ["f2-after-barrier"]]
    assert gate.blocked_channels == 0


def test_at_least_once_never_blocks_an_input() -> None:
    fast, slow = LocalChannel(64), LocalChannel(64)
    gate = InputGate([fast, slow], "at-least-once")
    fast.send(_barrier(1))
    fast.send(["f2-after-barrier"])
    assert _drain(gate) == [["f2-after-barrier"]]
    slow.send(_barrier(1))
    assert _drain(gate) == [_barrier(1)]


def test_several_checkpoints_in_flight_complete_in_order() -> None:
    a, b = LocalChannel(64), LocalChannel(64)
    gate = InputGate([a, b], "exactly-once")
    a.send(_barrier(1))
    a.send(["a-between"])
    b.send(_barrier(1))
    b.send(["b-between"])
    b.send(_barrier(2))
    a.send(_barrier(2))
    items = _drain(gate)
    assert [i for i in items if isinstance(i, Barrier)] == [_barrier(1), _barrier(2)]
    assert items.index(_barrier(1)) < items.index(["a-between"]) < items.index(_barrier(2))


def test_an_ended_input_no_longer_holds_alignment() -> None:
    a, b = LocalChannel(64), LocalChannel(64)
    gate = InputGate([a, b], "exactly-once")
    b.send(EndOfStream())
    a.send(_barrier(1))
    assert _drain(gate) == [_barrier(1)]
    a.send(EndOfStream())
    _drain(gate)
    assert gate.finished
