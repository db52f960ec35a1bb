"""The soak's reading of an in-place rescale's steps from etcd's changes, in order."""

from __future__ import annotations

from lockgate.runtime.coordination.kv_store import WatchEvent
from lockgate.runtime.coordination.records import RescaleResult, Trigger, encode

from tests.faults.rescale_steps import RescaleSteps
from tests.faults.soak_cluster import JOB


class Changes:
    """etcd's changes under the job's keys, one revision each."""

    def __init__(self, steps: RescaleSteps) -> None:
        self.steps = steps
        self.revision = steps.revision

    def put(self, key: bytes, value: bytes) -> None:
        self.revision += 1
        self.steps.see(WatchEvent(key, value, deleted=False, revision=self.revision))

    def answer(self, result: RescaleResult) -> None:
        self.put(JOB.rescale_result(self.steps.request_id), encode(result))

    def trigger(self, checkpoint_id: int, launch: int, stop: bool = False) -> None:
        self.put(JOB.trigger, encode(Trigger(checkpoint_id, launch, "checkpoint", "x", 0, stop)))

    def complete(self, checkpoint_id: int) -> None:
        self.put(JOB.completed_of(checkpoint_id), b"{}")

    def launch(self, number: int) -> None:
        self.put(JOB.launch, str(number).encode())


def seen(steps: RescaleSteps) -> list[str]:
    return [what for what, _ in steps.seen]


def test_the_steps_of_a_rescale_come_in_order_and_only_for_its_stop() -> None:
    steps = RescaleSteps(JOB, "r1", revision=10, launch=3)
    etcd = Changes(steps)
    etcd.trigger(7, 3, stop=True)  # a stop before the request was taken up is not its stop
    etcd.answer(RescaleResult("pending", 2))
    etcd.trigger(8, 3)
    etcd.complete(8)
    assert seen(steps) == ["taken-up"]
    etcd.answer(RescaleResult("pending", 2, stopped_ms=5))
    etcd.trigger(9, 3, stop=True)
    etcd.launch(4)  # not a relaunch: the stop checkpoint has not completed
    etcd.complete(9)
    assert seen(steps) == ["taken-up", "stop-triggered", "stop-completed"]
    assert not steps.over_before("relaunched")
    etcd.launch(5)
    etcd.answer(RescaleResult("rescaled", 1, checkpoint_id=9))
    assert steps.reached("relaunched")
    assert steps.over_before("relaunched")
    assert not steps.over_before("resumed"), "a rescaled job's relaunch goes on to its first checkpoint"
    etcd.complete(10)
    assert seen(steps) == [
        "taken-up",
        "stop-triggered",
        "stop-completed",
        "relaunched",
        "answered rescaled",
        "resumed",
    ]
    assert steps.revision == etcd.revision


def test_a_driver_taking_the_request_up_again_starts_the_steps_over() -> None:
    steps = RescaleSteps(JOB, "r1", revision=0, launch=1)
    etcd = Changes(steps)
    etcd.answer(RescaleResult("pending", 2))
    etcd.answer(RescaleResult("pending", 2, stopped_ms=5))
    etcd.trigger(4, 1, stop=True)
    etcd.launch(2)  # the driver died before its stop checkpoint completed: a new driver's launch
    etcd.complete(5)
    etcd.answer(RescaleResult("pending", 2))
    etcd.answer(RescaleResult("pending", 2, stopped_ms=9))
    etcd.trigger(6, 2, stop=True)
    etcd.complete(6)
    etcd.launch(3)
    assert seen(steps) == [
        "taken-up",
        "stop-triggered",
        "taken-up",
        "stop-triggered",
        "stop-completed",
        "relaunched",
    ]


def test_an_answer_that_ends_the_rescale_ends_the_wait_for_a_step() -> None:
    steps = RescaleSteps(JOB, "r1", revision=0, launch=1)
    etcd = Changes(steps)
    etcd.answer(RescaleResult("pending", 2))
    assert not steps.over_before("stop-triggered")
    etcd.answer(RescaleResult("refused", 2, reason="no"))
    assert steps.over_before("stop-triggered")
    assert steps.over_before("resumed")
    already = RescaleSteps(JOB, "r2", revision=0, launch=1)
    Changes(already).answer(RescaleResult("rescaled", 2, reason="already at it"))
    assert already.over_before("resumed"), "no relaunch follows: nothing to resume"
