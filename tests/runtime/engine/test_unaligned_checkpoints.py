"""Unaligned exactly-once checkpoints on the in-process engine (TCP exchange, as on
Spark): under backpressure they complete where aligned ones time out, the records
in flight are kept as channel state and replayed on restore, at any parallelism,
and the output stays exact."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.job_requests import await_rescale, request_rescale
from lockgate.runtime.coordination.records import CompletedCheckpoint, Trigger
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster, RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.state import SavepointWriter, StateAccessError, open_snapshot

from tests.exactness import assert_running_sums_exact
from tests.polling import eventually
from tests.runtime.engine.test_in_process import _spec

KEYS = 23
# 4 ms a record at the keyed operator, behind a source that reads as fast as it can:
# each subtask's input holds 2 channels x 8 frames x 64 records, about 4 s of its work
# (an aligned checkpoint waits for it), and a frame is a quarter of a second of it (what
# an unaligned one waits for: a source's send for room, a subtask's frame under way).
SLOW_MS = "4"
FRAME = 64
CAPACITY = 8


class Outcomes:
    """The checkpoints of a run, as the job master's listener hears of them."""

    def __init__(self) -> None:
        self.completions: list[CompletedCheckpoint] = []
        self.aborts: list[str] = []

    def completed(self, checkpoint: CompletedCheckpoint) -> None:
        self.completions.append(checkpoint)

    def aborted(self, trigger: Trigger, reason: str) -> None:
        self.aborts.append(reason)

    def restarted(self) -> None:
        pass

    @property
    def before_the_end(self) -> list[CompletedCheckpoint]:
        return [c for c in self.completions if not c.final]


def _slow_job(
    tmp_path: Path, store: InMemoryStore, count: int, unaligned_after_s: float | None, slow_ms: str = SLOW_MS
) -> JobSpec:
    args = {"count": str(count), "keys": str(KEYS), "slow_ms": slow_ms, "output": f"file://{tmp_path}/out"}
    spec = _spec(tmp_path, "tests.jobs.configurable:slow_running_sum", store, args)
    # Full frames whatever the wait (no frame sizing): the most there can be in flight.
    return replace(
        spec,
        unaligned_after_s=unaligned_after_s,
        in_flight_target_s=None,
        batch_size=FRAME,
        channel_capacity=CAPACITY,
    )


def _metadata(completed: CompletedCheckpoint) -> CheckpointMetadata:
    return read_metadata(CheckpointStorage(completed.path), CheckpointStorage(completed.path).root)


def _channel_records(completed: CompletedCheckpoint) -> int:
    state = _metadata(completed).vertices["sum"]
    return sum(s.channel.records for s in state.subtasks if s.channel is not None)


async def _run(
    tmp_path: Path, count: int, unaligned_after_s: float | None, timeout_s: float
) -> tuple[Outcomes, RunResult]:
    store = InMemoryStore()
    spec = _slow_job(tmp_path, store, count, unaligned_after_s)
    outcomes = Outcomes()
    config = CheckpointConfig(interval_s=0.2, timeout_s=timeout_s, tolerable_failures=1000, retained=100)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, config, listener=outcomes)
    result = await asyncio.wait_for(master.run(restart_strategy("none")), 120)
    return outcomes, result


async def test_under_backpressure_aligned_checkpoints_time_out_and_unaligned_ones_complete(
    tmp_path: Path,
) -> None:
    # Enough for the first checkpoints to be taken before the sources read all their input.
    aligned, _ = await _run(tmp_path / "aligned", 2_600, None, timeout_s=2.0)
    assert aligned.aborts, "an aligned checkpoint waits for everything in flight: longer than its timeout"
    assert not aligned.before_the_end, [c.duration_ms for c in aligned.before_the_end]

    count = 3_200
    unaligned, _ = await _run(tmp_path / "unaligned", count, 0.0, timeout_s=2.0)
    assert len(unaligned.before_the_end) >= 2, unaligned.aborts
    with_channel_state = [c for c in unaligned.before_the_end if _channel_records(c)]
    assert with_channel_state, "nothing was in flight"
    with pytest.raises(StateAccessError, match=r"was taken unaligned: \d+ records were in flight"):
        SavepointWriter.from_snapshot(open_snapshot(with_channel_state[0].path, unsigned=True))
    assert_running_sums_exact(read_committed(f"file://{tmp_path}/aligned/out"), 2_600, KEYS)
    assert_running_sums_exact(read_committed(f"file://{tmp_path}/unaligned/out"), count, KEYS)


def _channel_records_of(tmp_path: Path, checkpoint_id: int) -> int:
    path = f"file://{tmp_path}/checkpoints/in-process/chk-{checkpoint_id}"
    state = read_metadata(CheckpointStorage(path), CheckpointStorage(path).root).vertices["sum"]
    return sum(s.channel.records for s in state.subtasks if s.channel is not None)


async def test_rescaled_up_and_down_from_checkpoints_with_channel_state_the_output_is_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lockgate.runtime.engine.job_master")
    count = 9_000  # the sources still read at the second stop
    store = InMemoryStore()
    spec = _slow_job(tmp_path, store, count, 0.0, slow_ms="1")
    config = CheckpointConfig(interval_s=0.2, timeout_s=30, retained=100)
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, config)
    run = asyncio.create_task(master.run(restart_strategy("none")))
    out = f"file://{tmp_path}/out"

    def committed() -> int:
        try:
            return len(read_committed(out))
        except FileNotFoundError:
            return 0

    stops = []
    for parallelism in (3, 1):
        before = committed()
        await eventually(lambda before=before: committed() > before, "output committed", timeout_s=30)
        request = await request_rescale(store, spec.keys, parallelism, expires_in_s=60)
        answer = await await_rescale(store, spec.keys, request, 60)
        assert (answer.status, answer.parallelism) == ("rescaled", parallelism), answer
        assert answer.checkpoint_id is not None
        stops.append(answer.checkpoint_id)
    result = await asyncio.wait_for(run, 120)

    assert result.restarts == 0
    in_flight = [_channel_records_of(tmp_path, n) for n in stops]
    assert all(in_flight), f"records in flight at the stops: {in_flight}"
    # Each relaunch says what it restores and how many records in flight it replays.
    for parallelism, n, records in zip((3, 1), stops, in_flight, strict=True):
        said = f"at parallelism {parallelism} restores checkpoint {n} "
        line = next((m for m in caplog.messages if said in m), None)
        assert line is not None, caplog.messages
        assert line.endswith(f", replaying {records} records in flight (unaligned) before new input"), line
    assert_running_sums_exact(read_committed(out), count, KEYS)
