"""The loop takes no decision on incomplete metrics: a subtask of the running
launch that has not published its load counters, or stopped publishing them,
blocks every decision (naming it) until a full window of complete samples is
back. The records are the tasks' own (`TaskProgress`, as `Task.progress` makes
them) written to the control plane on a manual clock; the job master's part is
only which launch runs at what parallelism."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from lockgate.runtime.autoscaling.decision import Decision, ScalingPolicy
from lockgate.runtime.autoscaling.loop import Autoscaler
from lockgate.runtime.autoscaling.series import SubtaskLoad
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import RescaleRequest, decode
from lockgate.runtime.engine.control import TaskProgress

KEYS = JobKeys("test", "autoscaled")
LAUNCH, PARALLELISM = 7, 2
POLICY = ScalingPolicy(max_parallelism=8, key_groups=32, window_s=3.0, stabilization_s=1.0, catch_up_s=10.0)
START_MS = 1_800_000_000_000


class _Launch:
    """The job master's view the loop reads: launch 7 runs at parallelism 2."""

    running = (LAUNCH, PARALLELISM)


async def _publish(
    store: InMemoryStore,
    subtask: int,
    t: int,
    *,
    per_s: int,
    busy: float,
    backlog_per_s: int,
    partitions: int | None = None,
) -> None:
    """Subtask `subtask`'s counters `t` seconds into the launch: `per_s` records a
    second through both chains, its keyed chain `busy` of the time, its source's
    backlog growing by `backlog_per_s` a second."""
    load = (
        SubtaskLoad("numbers", subtask, per_s * t, 0.01 * t, 0.0, True, backlog_per_s * t, partitions),
        SubtaskLoad("sum", subtask, per_s * t, busy * t),
    )
    progress = TaskProgress(per_s * t, per_s * t, START_MS + t * 1000, load)
    await store.put(KEYS.progress_of(LAUNCH, subtask), json.dumps(asdict(progress)).encode())


async def _requests(store: InMemoryStore) -> list[int]:
    return [
        decode(RescaleRequest, value).parallelism
        for _, value in await store.get_prefix(KEYS.rescale_requests)
    ]


async def _second(autoscaler: Autoscaler, clock: ManualClock, t: int) -> Decision:
    clock.advance(START_MS + t * 1000 - clock.now_ms())
    decision = await autoscaler.step()
    assert decision is not None
    return decision


async def test_a_subtask_that_never_published_blocks_every_decision_until_a_full_window_has_it() -> None:
    clock = ManualClock(START_MS)
    store = InMemoryStore(clock)
    autoscaler = Autoscaler(store, KEYS, POLICY, _Launch(), clock, rescale_timeout_s=0.2)
    overloaded = {"per_s": 100, "busy": 1.0, "backlog_per_s": 100}  # twice what 2 subtasks take
    await autoscaler.step()  # the launch is seen at START_MS
    for t in range(1, 12):
        await _publish(store, 0, t, **overloaded)
        decision = await _second(autoscaler, clock, t)
        assert decision.action == "not-taken", decision
    assert "no metrics of numbers/1" in decision.reason, decision.reason
    assert await _requests(store) == [], "no rescale on incomplete metrics"

    taken = []
    for t in range(12, 16):
        await _publish(store, 0, t, **overloaded)
        await _publish(store, 1, t, **overloaded)
        taken.append(await _second(autoscaler, clock, t))
    assert [d.action for d in taken[:3]] == ["not-taken"] * 3, (
        "the window needs a complete sample at its start"
    )
    assert taken[3].action == "scale-up", taken[3]
    # Its request expires unanswered once the manual clock moves on.
    assert await _requests(store) == [taken[3].parallelism]
    (entry,) = autoscaler.history
    assert (entry.action, entry.outcome) == ("scale-up", "timed-out"), "nobody serves the request here"


async def test_a_subtask_that_stops_publishing_blocks_decisions_once_its_record_is_stale() -> None:
    clock = ManualClock(START_MS)
    store = InMemoryStore(clock)
    autoscaler = Autoscaler(store, KEYS, POLICY, _Launch(), clock, rescale_timeout_s=0.2)
    steady = {"per_s": 50, "busy": 0.5, "backlog_per_s": 0}  # 2 subtasks half busy: hold
    await autoscaler.step()
    actions = {}
    for t in range(1, 14):
        await _publish(store, 0, t, **steady)
        if t <= 7:
            await _publish(store, 1, t, **steady)
        actions[t] = (decision := await _second(autoscaler, clock, t)).action
    assert [actions[t] for t in range(5, 8)] == ["hold"] * 3, actions
    # Published last at 7 s: stale (2.5 s behind subtask 0) from 10 s on.
    assert [actions[t] for t in range(10, 14)] == ["not-taken"] * 4, actions
    assert "no metrics of numbers/1" in decision.reason, decision.reason
    assert await _requests(store) == []


@pytest.mark.parametrize(("partitions", "target"), [(3, 6), (None, 5)])
async def test_a_scale_up_rounds_to_an_even_split_of_the_sources_partitions(
    partitions: int | None, target: int
) -> None:
    """Two subtasks reading 3 partitions each: 6. The load needs 5 subtasks (340
    records/s at 100 a subtask, 70 % busy); 6 splits the partitions evenly, and 5 is
    what a source that is not partitioned gets (no divisor of the 32 key groups near)."""
    clock = ManualClock(START_MS)
    store = InMemoryStore(clock)
    autoscaler = Autoscaler(store, KEYS, POLICY, _Launch(), clock, rescale_timeout_s=0.2)
    load = {"per_s": 100, "busy": 1.0, "backlog_per_s": 50, "partitions": partitions}
    await autoscaler.step()
    for t in range(1, 5):
        for subtask in range(PARALLELISM):
            await _publish(store, subtask, t, **load)
        decision = await _second(autoscaler, clock, t)
    assert decision.action == "scale-up", decision
    assert decision.parallelism == target, decision
    assert autoscaler.policy.kafka_partitions == (None if partitions is None else 2 * partitions)
