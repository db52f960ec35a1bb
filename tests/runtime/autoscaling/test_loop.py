"""The autoscaler's loop on the in-process engine, beside the job master, in
compressed time (windows of seconds): the job's tasks publish their load
counters to the control plane, the loop samples them, decides, and asks the
job master's own coordinator for a rescale in place.

The job: a rate-held generator (150 records/s) into a keyed running sum that
spends a set time on each record (10 ms: 100 records/s per subtask, so P = 1
cannot keep up). A load that drops is the Kafka scenario's
(test_autoscaling_on_kafka.py). The
time is slept, not computed: the subtasks are threads of one process, whose
computing would share one interpreter lock, and two cores with the rest of the
suite."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.autoscaling.decision import ScalingPolicy
from lockgate.runtime.autoscaling.loop import Autoscaler
from lockgate.runtime.autoscaling.status import AutoscalerStatus
from lockgate.runtime.clock import SystemClock
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.records import decode
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster, RunResult
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.keygroups import key_group, operator_index
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.exactness import assert_running_sums_exact
from tests.runtime.engine.test_in_process import _spec

RATE, KEYS = 150, 13
POLICY = ScalingPolicy(
    max_parallelism=8,
    key_groups=32,  # _spec's maxParallelism
    window_s=3.0,
    stabilization_s=2.0,
    catch_up_s=10.0,
    scale_down_delay_s=4.0,
)


async def _autoscaled(
    tmp_path: Path, parallelism: int, policy: ScalingPolicy, **args: str
) -> tuple[RunResult, JobMaster, Autoscaler, AutoscalerStatus]:
    """Runs the job to its end with the loop beside its job master; the record
    the loop left in the control plane."""
    store = InMemoryStore()
    out = f"file://{tmp_path}/out"
    job_args = {"rate": str(RATE), "keys": str(KEYS), "output": out, **args}
    spec = _spec(tmp_path, "tests.jobs.costly:costly_running_sum", store, job_args)
    # A source reads up to batch_size records at once and pushes them on before it reads
    # again or takes a barrier: behind 100 records/s a batch of 512 is 5 s, longer than
    # these windows, and a rescale's stop would wait that long. 16 is a sixth of a second.
    spec = dataclasses.replace(spec, parallelism=parallelism, batch_size=16)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.2, timeout_s=30))
    autoscaler = Autoscaler(store, spec.keys, policy, master, SystemClock(), interval_s=0.5)
    loop = asyncio.create_task(autoscaler.run())
    try:
        result = await asyncio.wait_for(master.run(restart_strategy("none")), 60)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    record = await store.get(spec.keys.autoscaler)
    assert record is not None, "the loop published nothing"
    return result, master, autoscaler, decode(AutoscalerStatus, record)


async def test_a_load_p1_cannot_keep_up_with_scales_up_once_and_the_output_is_exact(tmp_path: Path) -> None:
    count = 14 * RATE
    policy = dataclasses.replace(POLICY, scale_down_delay_s=60.0)  # the input's end is no load drop here
    result, master, autoscaler, status = await _autoscaled(
        tmp_path, 1, policy, count=str(count), cost_ms="10"
    )

    assert len(autoscaler.history) == 1, [
        (h.action, h.from_parallelism, h.to_parallelism, h.outcome, h.reason, h.detail)
        for h in autoscaler.history
    ]
    (up,) = autoscaler.history
    assert (up.action, up.from_parallelism, up.outcome) == ("scale-up", 1, "rescaled"), up
    # 150 records/s at 100 per subtask and busy second, at most 70 % busy: at least 3 subtasks.
    assert 3 <= up.to_parallelism <= 8, up
    assert up.reason.startswith("scale up 1 -> "), up.reason
    assert "backlog " in up.reason, up.reason
    assert master.spec.parallelism == up.to_parallelism
    assert result.restarts == 0, "a rescale is not a restart"
    assert_running_sums_exact(read_committed(f"file://{tmp_path}/out"), count, KEYS)
    assert status.history == autoscaler.history
    assert status.parallelism == up.to_parallelism
    assert status.inputs is not None
    assert status.inputs["needed"]["sum"] <= up.to_parallelism
    # The tasks counted the sum's records per key group: the record shows what share
    # the busiest subtask takes, which the 13 keys (record n has key n % 13) set.
    owners = Counter(operator_index(key_group(k, 32), 32, up.to_parallelism) for k in range(KEYS))
    busiest = status.inputs["chains"]["sum"]["busiestShare"]
    assert busiest == pytest.approx(max(owners.values()) / KEYS, abs=0.03), (busiest, owners)


async def test_a_constant_load_the_job_keeps_up_with_is_never_rescaled(tmp_path: Path) -> None:
    count = 10 * RATE  # 5 ms a record: 2 subtasks are 38 % busy, 1 would be 75 %
    _, master, autoscaler, status = await _autoscaled(tmp_path, 2, POLICY, count=str(count), cost_ms="5")

    assert autoscaler.history == ()
    assert master.spec.parallelism == 2
    assert status.last_decision["action"] in ("hold", "not-taken"), status.last_decision
    assert autoscaler.last is not None
    assert autoscaler.last.sizing is not None, "it decided on complete metrics"
    assert_running_sums_exact(read_committed(f"file://{tmp_path}/out"), count, KEYS)
