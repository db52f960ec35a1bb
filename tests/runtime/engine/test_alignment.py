"""Barrier alignment: a fast input is held back until the slow one's barrier arrives."""

from __future__ import annotations

import pickle
import time

from lockgate.runtime.coordination.records import Trigger
from lockgate.runtime.engine.alignment import ChannelState, InputGate
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


def _unaligned(channels: list[LocalChannel], after_s: float = 0.0) -> InputGate:
    return InputGate(channels, "exactly-once", unaligned_after_s=after_s)


def _records(state: ChannelState) -> list[object]:
    return [record for frame in state.frames for record in pickle.loads(frame)]


def test_an_overtaking_barrier_is_taken_at_once_and_what_it_overtook_is_the_channel_state() -> None:
    a, b = LocalChannel(4), LocalChannel(4)
    gate = _unaligned([a, b])
    a.send(["a1"])
    a.send(["a2"])
    a.send_overtaking(_barrier(1), ["a3-partial"])
    a.send(["a4-after"])
    b.send(["b1"])
    assert gate.poll() == _barrier(1), "taken before anything it overtook is read"
    assert gate.gathering(1)
    b.send_overtaking(_barrier(1), None)
    b.send(["b2-after"])
    items = _drain(gate)
    states = [i for i in items if isinstance(i, ChannelState)]
    read = [i[0] for i in items if isinstance(i, list)]
    assert [r for r in read if r.startswith("a")] == ["a1", "a2", "a3-partial", "a4-after"]
    assert [r for r in read if r.startswith("b")] == ["b1", "b2-after"], (
        "all still read, each channel in order"
    )
    assert len(states) == 1
    assert sorted(_records(states[0])) == ["a1", "a2", "a3-partial", "b1"], "what lay before the barriers"
    assert not gate.gathering(1)


def test_a_channel_whose_barrier_has_not_arrived_adds_what_it_yields_until_it_does() -> None:
    a, b = LocalChannel(4), LocalChannel(4)
    gate = _unaligned([a, b])
    a.send_overtaking(_barrier(1), None)
    assert gate.poll() == _barrier(1)
    b.send(["b1"])
    b.send(["b2"])
    assert gate.poll() == ["b1"]
    b.send_overtaking(_barrier(1), None)
    items = _drain(gate)
    frames = tuple(pickle.dumps(e, pickle.HIGHEST_PROTOCOL) for e in (["b1"], ["b2"]))
    assert items == [ChannelState(1, frames), ["b2"]], "complete once the barrier is in; b2 still read after"


def test_with_a_timeout_the_gate_aligns_first_and_goes_unaligned_once_it_has_waited_that_long() -> None:
    a, b = LocalChannel(4), LocalChannel(4)
    gate = _unaligned([a, b], after_s=0.2)
    a.send_overtaking(_barrier(1), None)
    a.send(["a-after"])
    b.send(["b1"])
    started = time.monotonic()
    assert gate.poll() == ["b1"]
    assert gate.poll() is None, "aligning: the channel whose barrier is in waits"
    assert gate.blocked_channels == 1
    barrier = eventually_polled(gate)
    assert barrier == _barrier(1)
    assert time.monotonic() - started >= 0.2
    assert gate.unaligned_taken == 1
    assert gate.poll() == ["a-after"], "unblocked once taken"


def test_an_alignment_that_completes_within_the_timeout_stays_aligned() -> None:
    a, b = LocalChannel(4), LocalChannel(4)
    gate = _unaligned([a, b], after_s=60)
    a.send(["a1"])
    a.send_overtaking(_barrier(1), None)
    b.send_overtaking(_barrier(1), None)
    assert _drain(gate) == [["a1"], _barrier(1)], "read up to each barrier's place, then passed on"
    assert gate.unaligned_taken == 0
    assert not gate.gathering(1)


def test_savepoints_and_a_possibly_final_checkpoint_stay_aligned_whatever_the_timeout() -> None:
    savepoint = Barrier(Trigger(1, 1, "savepoint", "file:///sp-1", 0, False))
    drained = Barrier(_barrier(2).trigger, drained=True)
    for barrier in (savepoint, drained):
        a, b = LocalChannel(4), LocalChannel(4)
        gate = _unaligned([a, b])
        a.send(["a1"])
        a.send_overtaking(barrier, None)
        b.send(["b1"])
        assert sorted(_drain(gate)) == [["a1"], ["b1"]], "no barrier until every channel's is at its place"
        b.send_overtaking(barrier, None)
        assert _drain(gate) == [barrier]
        assert gate.unaligned_taken == 0


def test_a_restored_channel_state_is_read_before_any_new_input() -> None:
    a = LocalChannel(4)
    a.send(["new"])
    gate = InputGate([a], "exactly-once", unaligned_after_s=0.0, replay=[["replayed-1"], ["replayed-2"]])
    assert _drain(gate) == [["replayed-1"], ["replayed-2"], ["new"]]


def eventually_polled(gate: InputGate) -> object:
    """The gate's next item, once it has one (within 5 s)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if (item := gate.poll()) is not None:
            return item
        time.sleep(0.005)
    raise AssertionError("the gate yielded nothing")


def test_after_a_stop_checkpoint_taken_unaligned_what_is_left_to_read_is_dropped_not_processed() -> None:
    stop = Barrier(Trigger(1, 1, "checkpoint", "file:///chk-1", 0, True))
    a = LocalChannel(4)
    gate = _unaligned([a])
    a.send(["a1"])
    a.send(["a2"])
    a.send_overtaking(stop, None)
    a.send(EndOfStream())
    items = _drain(gate)
    assert items[0] == stop
    assert isinstance(items[1], ChannelState)
    assert _records(items[1]) == ["a1", "a2"], "the next launch replays them"
    assert items[2:] == [], "the stopping launch does not process them too"
    assert gate.finished
