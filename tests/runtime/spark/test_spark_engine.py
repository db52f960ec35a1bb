"""The product path: a job as one Spark barrier stage on local[3], tasks exchanging
records over authenticated TCP, checkpoints through a real etcd."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.engine.job_master import JobGaveUpError
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.handles import CanonicalKeyedHandle, NativeKeyedHandle
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage

from tests.exactness import assert_running_sums_exact, assert_word_counts_exact
from tests.one_launch import run_once
from tests.runtime.engine.test_local_engine import _write_lines

M = 32


SpecFactory = Callable[..., JobSpec]


@pytest.fixture
def make_spec(etcd_config, keys, tmp_path: Path) -> SpecFactory:
    """A bounded job of `entrypoint` at `parallelism`, writing to `tmp_path/out` unless told."""

    def make(entrypoint: str, parallelism: int, **args: str) -> JobSpec:
        args = {"output": f"file://{tmp_path}/out", **args}
        return JobSpec(
            entrypoint=entrypoint,
            keys=keys,
            parallelism=parallelism,
            state=StateConfig("rocksdb", tmp_path / "local", M),
            control_plane=etcd_config,
            secret=secrets.token_bytes(32),
            args=tuple(args.items()),
            bounded=True,
            batch_size=64,
        )

    return make


def test_an_in_memory_control_plane_is_refused_before_spark_runs_a_task(
    spark, make_spec: SpecFactory
) -> None:
    spec = dataclasses.replace(
        make_spec("tests.jobs.configurable:running_sum", 2), control_plane=InMemoryStore()
    )
    with pytest.raises(ValueError, match="executor processes, which cannot reach an in-memory control plane"):
        BarrierStage(spark).run(spec)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_word_count_on_spark_is_exact(
    spark, make_spec: SpecFactory, keys, tmp_path: Path, parallelism
) -> None:
    words = _write_lines(tmp_path / "lines", partitions=4, lines=300)
    spec = make_spec(
        "tests.jobs.configurable:word_count",
        parallelism,
        input=f"file://{tmp_path}/lines",
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    await run_once(spec, BarrierStage(spark), storage, CheckpointConfig(interval_s=0.2, timeout_s=60))

    output = read_committed(f"file://{tmp_path}/out")
    assert_word_counts_exact(output, words)


async def test_a_failing_coordinator_cancels_the_spark_stage(
    spark, make_spec: SpecFactory, keys, tmp_path: Path
) -> None:
    spec = make_spec(
        "tests.jobs.configurable:running_sum",
        2,
        count="unbounded",
        rate="2000",
    )
    # Checkpoint storage where a file blocks the job's directory: every checkpoint fails.
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / keys.job).touch()
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.2, timeout_s=60, tolerable_failures=1)
    with pytest.raises(
        JobGaveUpError, match=r"no restarts.*JobFailedError: 2 consecutive checkpoints failed"
    ):
        await asyncio.wait_for(run_once(spec, BarrierStage(spark), storage, config), 120)
    # The unbounded tasks were interrupted: the slots are free for the next stage.
    assert spark.sparkContext.statusTracker().getActiveStageIds() == []


@pytest.mark.parametrize("parallelism", [1, 2, 3])
async def test_keyed_running_sum_on_spark_is_exact(
    spark, make_spec: SpecFactory, keys, tmp_path: Path, parallelism
) -> None:
    count, key_count = 6000, 37
    spec = make_spec(
        "tests.jobs.configurable:running_sum",
        parallelism,
        count=str(count),
        keys=str(key_count),
        partitions="5",
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    await run_once(spec, BarrierStage(spark), storage, CheckpointConfig(interval_s=0.2, timeout_s=60))

    output = read_committed(f"file://{tmp_path}/out")
    assert_running_sums_exact(output, count, key_count)


async def test_a_savepoint_of_another_max_parallelism_is_refused_before_launch(
    spark, make_spec: SpecFactory, keys, tmp_path: Path
) -> None:
    spec = make_spec(
        "tests.jobs.configurable:running_sum",
        2,
        count="500",
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    config = CheckpointConfig(interval_s=0.2, timeout_s=60)
    await run_once(spec, BarrierStage(spark), storage, config)
    taken = next(Path(tmp_path, "checkpoints", keys.job).glob("chk-*/_metadata")).parent

    wider = dataclasses.replace(spec, state=StateConfig("rocksdb", tmp_path / "local", 2 * M))
    with pytest.raises(MaxParallelismMismatchError, match=rf"max parallelism {M} .* this run has {2 * M}"):
        await run_once(wider, BarrierStage(spark), storage, config, from_savepoint=f"file://{taken}")


@pytest.mark.parametrize(
    ("incremental", "handle"), [(True, NativeKeyedHandle), (False, CanonicalKeyedHandle)]
)
async def test_checkpoints_are_native_incremental_unless_turned_off(
    spark, make_spec: SpecFactory, keys, tmp_path: Path, incremental: bool, handle: type
) -> None:
    spec = make_spec("tests.jobs.configurable:running_sum", 2, count="500")
    spec = dataclasses.replace(spec, state=dataclasses.replace(spec.state, incremental=incremental))
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    await run_once(spec, BarrierStage(spark), storage, CheckpointConfig(interval_s=0.2, timeout_s=60))
    taken = next(Path(tmp_path, "checkpoints", keys.job).glob("chk-*/_metadata")).parent
    metadata = read_metadata(storage, f"file://{taken}")
    subtasks = metadata.vertices["sum"].subtasks
    assert [type(s.keyed) for s in subtasks] == [handle, handle]
