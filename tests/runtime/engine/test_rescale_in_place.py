"""A rescale in place on the in-process engine: the same job master stops its tasks
at a checkpoint and starts them again at the new parallelism, on request; refused
targets leave the job running as it was."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_rescale, request_rescale
from lockgate.runtime.coordination.records import RescaleResult
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster, RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.exactness import assert_running_sums_exact
from tests.polling import eventually, wait_until
from tests.runtime.engine.test_in_process import _spec

COUNT, KEYS = 9_000, 17


def _committed(url: str) -> int:
    try:
        return len(read_committed(url))
    except FileNotFoundError:
        return 0


async def _rescale(store: InMemoryStore, master: JobMaster, parallelism: object) -> RescaleResult:
    request = await request_rescale(store, master.spec.keys, parallelism, expires_in_s=60)  # type: ignore[arg-type]
    return await await_rescale(store, master.spec.keys, request, 60)


async def test_rescaled_2_to_3_to_1_mid_stream_the_output_is_exact_and_nothing_restarted(
    tmp_path: Path,
) -> None:
    out = f"file://{tmp_path}/out"
    store = InMemoryStore()
    args = {"count": str(COUNT), "keys": str(KEYS), "rate": "3000", "output": out}
    spec = _spec(tmp_path, "tests.jobs.configurable:running_sum", store, args)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.1, timeout_s=30))
    run: asyncio.Task[RunResult] = asyncio.create_task(master.run(restart_strategy("none")))

    await eventually(lambda: _committed(out) > 0, "committed output", timeout_s=30)
    up = await _rescale(store, master, 3)
    assert (up.status, up.parallelism) == ("rescaled", 3), up
    assert up.checkpoint_id is not None, up
    assert up.stopped_ms is not None, up
    assert up.relaunched_ms is not None, up
    assert master.spec.parallelism == 3
    committed = _committed(out)
    await eventually(lambda: _committed(out) > committed, "output at 3", timeout_s=30)

    # Two at once: one after the other, the second served by the relaunched tasks' coordinator.
    keys = spec.keys
    down, again = (
        await request_rescale(store, keys, 1, expires_in_s=60),
        await request_rescale(store, keys, 1, expires_in_s=60),
    )
    first, second = await asyncio.gather(
        await_rescale(store, keys, down, 60), await_rescale(store, keys, again, 60)
    )
    assert (first.status, first.parallelism) == ("rescaled", 1), first
    assert (second.status, second.parallelism, second.reason) == ("rescaled", 1, "already at it"), second

    result = await asyncio.wait_for(run, 120)
    assert result.restarts == 0, "a rescale is not a restart"
    assert master.spec.parallelism == 1
    assert_running_sums_exact(read_committed(out), COUNT, KEYS)


async def test_rocksdb_state_is_restored_from_the_old_subtasks_local_files_and_the_output_is_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Local recovery on the in-process engine: each rescale's new subtasks link the
    SST files the old ones left on this machine, and download none."""
    caplog.set_level(logging.INFO, logger="lockgate.runtime.backends.rocksdb.backend")
    out = f"file://{tmp_path}/out"
    store = InMemoryStore()
    args = {"count": str(COUNT), "keys": str(KEYS), "rate": "3000", "output": out}
    spec = _spec(tmp_path, "tests.jobs.configurable:running_sum", store, args)
    spec = dataclasses.replace(spec, state=StateConfig("rocksdb", tmp_path / "local", 32))
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.1, timeout_s=30))
    run: asyncio.Task[RunResult] = asyncio.create_task(master.run(restart_strategy("none")))

    for target in (3, 1):
        await eventually(lambda: _committed(out) > 0, "committed output", timeout_s=30)
        caplog.clear()
        result = await _rescale(store, master, target)
        assert (result.status, result.parallelism) == ("rescaled", target), result
        before = _committed(out)
        await eventually(lambda b=before: _committed(out) > b, f"output at {target}", timeout_s=30)
        restores = [r.getMessage() for r in caplog.records if "restored natively" in r.getMessage()]
        assert len(restores) == target, restores
        assert all("linked" in r and "downloaded" not in r for r in restores), restores

    result = await asyncio.wait_for(run, 120)
    assert result.restarts == 0
    assert_running_sums_exact(read_committed(out), COUNT, KEYS)


async def test_a_target_the_job_cannot_take_is_refused_naming_why_and_the_job_runs_on(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/out"
    store = InMemoryStore()
    args = {"count": "4000", "keys": "7", "rate": "2000", "output": out}
    spec = _spec(tmp_path, "tests.jobs.configurable:running_sum", store, args)  # maxParallelism 32
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.1, timeout_s=30))
    run = asyncio.create_task(master.run(restart_strategy("none")))
    await eventually(lambda: _committed(out) > 0, "committed output", timeout_s=30)

    above = await _rescale(store, master, 33)
    assert (above.status, above.parallelism) == ("refused", 2), above
    assert "above the job's maxParallelism 32" in str(above.reason), above
    for bad in ("three", 0, True, 2.5):
        refused = await _rescale(store, master, bad)
        assert refused.status == "refused", (bad, refused)
        assert f"parallelism {bad!r} is not a whole number of at least 1" == refused.reason, refused

    result = await asyncio.wait_for(run, 60)
    assert result.restarts == 0
    assert master.spec.parallelism == 2
    assert_running_sums_exact(read_committed(out), 4000, 7)


class FailingDuringRescale:
    """The real tasks (ThreadStage), failing at one step of a rescale: `reserve` holds
    the reservation until the running launch has failed (the job fails once at record
    `fail_at`); `relaunch` fails the first launch at the new parallelism."""

    def __init__(self, step: str, failed_flag: Path) -> None:
        self.inner = ThreadStage()
        self.step = step
        self.failed_flag = failed_flag
        self.launches: list[int] = []
        self.reservations = 0

    def run(self, spec: JobSpec) -> None:
        self.launches.append(spec.parallelism)
        if (
            self.step == "relaunch"
            and spec.parallelism != self.launches[0]
            and self.launches.count(spec.parallelism) == 1
        ):
            raise RuntimeError("a task of the new parallelism's first launch was lost")
        self.inner.run(spec)

    def cancel(self) -> None:
        self.inner.cancel()

    @property
    def stop_wait_s(self) -> float | None:
        return self.inner.stop_wait_s

    def reserve(self, parallelism: int, timeout_s: float) -> None:
        self.reservations += 1
        if self.step == "reserve" and self.reservations == 1:
            wait_until(self.failed_flag.exists, "the running launch failed", 30)
        self.inner.reserve(parallelism, timeout_s)

    def release_surplus(self, parallelism: int) -> None:
        self.inner.release_surplus(parallelism)


@pytest.mark.parametrize("step", ["reserve", "relaunch"])
async def test_a_launch_failing_during_a_rescale_is_restarted_and_the_rescale_still_happens_exactly(
    tmp_path: Path, step: str
) -> None:
    out, flag = f"file://{tmp_path}/out", tmp_path / "failed-once"
    store = InMemoryStore()
    args = {"count": str(COUNT), "keys": str(KEYS), "rate": "3000", "output": out, "flag": str(flag)}
    # `reserve`: the job fails soon after the request, while the reservation is held;
    # `relaunch`: it never fails by itself.
    args["fail_at"] = "4000" if step == "reserve" else str(10 * COUNT)
    spec = _spec(tmp_path, "tests.jobs.configurable:failing_running_sum", store, args)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    stage = FailingDuringRescale(step, flag)
    master = JobMaster(spec, stage, storage, CheckpointConfig(interval_s=0.1, timeout_s=30))
    run = asyncio.create_task(master.run(restart_strategy("fixed-delay", attempts=3, delay_s=0)))
    await eventually(lambda: _committed(out) > 0, "committed output", timeout_s=30)

    result = await _rescale(store, master, 3)
    assert (result.status, result.parallelism) == ("rescaled", 3), result
    finished = await asyncio.wait_for(run, 120)
    assert finished.restarts == 1, "the failure was restarted, the rescale was not"
    if step == "reserve":
        assert stage.launches[:2] == [2, 2], "the failed launch was restarted at its own parallelism"
        assert stage.reservations == 2, "the restarted launch served the request again"
    else:
        assert stage.launches == [2, 3, 3], "the new parallelism's failed launch was restarted at it"
    assert_running_sums_exact(read_committed(out), COUNT, KEYS)
