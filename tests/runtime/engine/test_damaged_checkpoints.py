"""A driver never restores a damaged checkpoint, never starts empty over one, and
never silently restores one behind output already committed.

A job (a keyed running sum on RocksDB, FileSink) fails after two checkpoints
completed; then the latest is damaged (a file of it, found by the driver before a
launch or by a task while restoring), replaced by the older one copied over it, or
lost. The next launch refuses to restore the checkpoint before it, since its
sinks committed the latest's output — unless the run accepts the duplicates
(`--accept-duplicate-output`); when no checkpoint is intact, it refuses to start.
The output tells what was restored: records after the restored checkpoint are
written again, so exactly those the skipped checkpoint committed appear twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import secrets
import shutil
from pathlib import Path

import pytest
from lockgate.runtime import read_committed
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.errors import NoUsableCheckpointError, RestoreBehindCommittedOutputError
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import CompletedCheckpoint
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobGaveUpError, JobMaster, Stage
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import RestartStrategy, restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

from tests.exactness import assert_running_sums_exact
from tests.polling import eventually_true
from tests.runtime.snapshot.test_corruption import flip_byte

COUNT = 12_000
KEYS = 41
CONFIG = CheckpointConfig(interval_s=0.05, timeout_s=30, retained=2)


class Driver:
    """What one driver process is: a job master over the job's etcd and storage."""

    def __init__(self, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path) -> None:
        self.etcd_config = etcd_config
        self.keys = keys
        self.out = tmp_path / "out"
        self.savepoints = tmp_path / "savepoints"
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
        self.spec = JobSpec(
            entrypoint="tests.jobs.configurable:failing_running_sum",
            keys=keys,
            parallelism=2,
            state=StateConfig("rocksdb", tmp_path / "local", 32),
            control_plane=etcd_config,
            secret=secrets.token_bytes(32),
            args=(
                ("output", f"file://{self.out}"),
                ("count", str(COUNT)),
                ("keys", str(KEYS)),
                ("rate", "6000"),
                ("fail_at", str(COUNT // 4)),
                ("checkpoints", "2"),
                ("flag", str(tmp_path / "failed-once")),
            ),
            bounded=True,
            batch_size=32,
        )

    async def run(
        self,
        stage: Stage,
        strategy: RestartStrategy | None = None,
        from_savepoint: str | None = None,
        *,
        accept_duplicates: bool = False,
    ) -> JobMaster:
        master = JobMaster(
            self.spec,
            stage,
            self.storage,
            CONFIG,
            savepoint_dir=f"file://{self.savepoints}",
            accept_duplicate_output=accept_duplicates,
        )
        await master.run(strategy or restart_strategy("none"), from_savepoint=from_savepoint)
        return master

    def output_files(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir())

    async def refused_behind(self, stage: Stage, strategy: RestartStrategy | None = None) -> str:
        """The message of a run refused because it would restore behind committed output."""
        with pytest.raises(RestoreBehindCommittedOutputError) as raised:
            await self.run(stage, strategy)
        return str(raised.value)

    async def fail_after_two_checkpoints(self) -> tuple[CompletedCheckpoint, CompletedCheckpoint]:
        with pytest.raises(JobGaveUpError, match="injected failure"):
            await self.run(WatchedStage())
        # Two at least (retention may not have run after the last completion).
        *_, older, latest = await self.completed()
        return older, latest

    async def completed(self) -> list[CompletedCheckpoint]:
        async with Etcd(self.etcd_config) as etcd:
            return await CompletedCheckpointStore(etcd, self.keys, self.storage, CONFIG.retained).all()

    async def unusable(self) -> dict[int, str]:
        async with Etcd(self.etcd_config) as etcd:
            store = CompletedCheckpointStore(etcd, self.keys, self.storage, CONFIG.retained)
            return {n: mark.reason for n, mark in (await store.unusable.all()).items()}

    def committed_by(self, checkpoint: CompletedCheckpoint) -> set[int]:
        """Records in the visible files checkpoint `checkpoint` committed."""
        suffix = f"-chk{checkpoint.checkpoint_id}.jsonl"
        return {
            r["n"]
            for path in self.out.iterdir()
            if path.name.endswith(suffix) and not path.name.startswith((".", "_"))
            for r in read_committed(f"file://{path}")
        }

    def committed_after(self, checkpoint: CompletedCheckpoint) -> set[int]:
        """Records in the visible files of every checkpoint after `checkpoint`: what a
        restore of `checkpoint` writes again. A checkpoint aborted after its sink
        pre-committed (one the stop savepoint overtook) has its file committed with the
        next that completes, under its own id."""
        return {
            r["n"]
            for path in self.out.iterdir()
            if (id_ := re.search(r"-chk(\d+)\.jsonl$", path.name)) is not None
            and int(id_.group(1)) > checkpoint.checkpoint_id
            and not path.name.startswith((".", "_"))
            for r in read_committed(f"file://{path}")
        }

    def assert_output_written_again_after(self, duplicated: set[int]) -> None:
        output = read_committed(f"file://{self.out}")
        assert_running_sums_exact(output, COUNT, KEYS, written_twice=frozenset(duplicated))


def _private_file(checkpoint: CompletedCheckpoint) -> str:
    """A file of `checkpoint` no other checkpoint shares (a source's offsets)."""
    return f"{checkpoint.path.removeprefix('file://')}/numbers/0/operator"


class WatchedStage:
    """Runs each launch on `inner` (by default `ThreadStage`: the real tasks, as
    threads) and records what it restored. With `damage`, first damages a file of
    what the first launch restores — after the driver verified it — so that a task
    finds it; with `repair` too, puts the byte back once that launch failed (a read
    that went wrong, not a file that stays bad)."""

    def __init__(self, inner: Stage | None = None, *, damage: bool = False, repair: bool = False) -> None:
        self.inner = inner or ThreadStage()
        self.damage = damage
        self.repair = repair
        self.restored: list[str | None] = []

    def run(self, spec: JobSpec) -> None:
        first = not self.restored
        self.restored.append(None if spec.restore is None else spec.restore.url)
        if not (first and self.damage) or spec.restore is None:
            return self.inner.run(spec)
        damaged = f"{spec.restore.storage.root}/numbers/0/operator"
        flip_byte(damaged, 5)
        try:
            self.inner.run(spec)
        finally:
            if self.repair:
                flip_byte(damaged, 5)

    def cancel(self) -> None:
        self.inner.cancel()

    @property
    def stop_wait_s(self) -> float | None:
        return self.inner.stop_wait_s

    def reserve(self, parallelism: int, timeout_s: float) -> None:
        self.inner.reserve(parallelism, timeout_s)

    def release_surplus(self, parallelism: int) -> None:
        self.inner.release_surplus(parallelism)


@pytest.fixture
def driver(etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path) -> Driver:
    return Driver(etcd_config, keys, tmp_path)


async def test_a_latest_checkpoint_damaged_by_a_byte_flip_is_refused_unless_duplicates_are_accepted(
    driver: Driver,
) -> None:
    """Failed before: the driver logged a warning and restored the checkpoint before,
    writing the latest's committed output again."""
    older, latest = await driver.fail_after_two_checkpoints()
    damaged = Path(_private_file(latest))
    flip_byte(str(damaged), damaged.stat().st_size // 2)  # same size: only the checksum tells
    duplicated = driver.committed_by(latest)
    before = driver.output_files()

    stage = WatchedStage()
    message = await driver.refused_behind(stage)
    assert stage.restored == [], "no task started"
    assert driver.output_files() == before, "nothing written again"
    assert (
        f"the newest snapshot that can be restored is checkpoint {older.checkpoint_id} ({older.path})"
        in message
    )
    assert f"checkpoint {latest.checkpoint_id} completed after it" in message
    assert (
        f"checkpoint {latest.checkpoint_id} ({latest.path}): snapshot file {damaged}: checksum mismatch"
        in message
    )
    assert "--accept-duplicate-output" in message

    stage = WatchedStage()
    await driver.run(stage, accept_duplicates=True)
    assert stage.restored == [older.path]
    driver.assert_output_written_again_after(duplicated)


async def test_an_older_checkpoint_copied_over_the_latest_is_refused_and_nothing_is_duplicated(
    driver: Driver,
) -> None:
    """Failed before: storage alone (no key) rolled the job back: the copy's signed
    `_metadata` and files verified, "the latest" restored the older one's offsets and
    its output was committed twice."""
    older, latest = await driver.fail_after_two_checkpoints()
    latest_dir = latest.path.removeprefix("file://")
    shutil.rmtree(latest_dir)
    shutil.copytree(older.path.removeprefix("file://"), latest_dir)
    before = driver.output_files()

    stage = WatchedStage()
    message = await driver.refused_behind(stage)
    assert stage.restored == [], "no task started"
    assert driver.output_files() == before, "nothing written again"
    assert (
        f"checkpoint {latest.checkpoint_id} ({latest.path}): snapshot file {latest_dir}/_metadata: is not "
        "the one etcd recorded when this snapshot completed" in message
    )
    assert list(await driver.unusable()) == [latest.checkpoint_id]


async def test_a_lost_stop_savepoint_is_refused_unless_duplicates_are_accepted(
    driver: Driver, etcd_config: EtcdConfig
) -> None:
    """Failed before: the job stopped with a savepoint nobody can read any more (it
    went to a place that vanished), and the next run fell back to the checkpoint
    before it with no more than a warning, committing the savepoint's output twice."""
    driver.spec = dataclasses.replace(
        driver.spec,
        entrypoint="tests.jobs.configurable:running_sum",
        args=(
            ("output", f"file://{driver.out}"),
            ("count", str(COUNT)),
            ("keys", str(KEYS)),
            ("rate", "4000"),
        ),
    )
    run = asyncio.create_task(driver.run(WatchedStage()))

    async def committed_twice() -> bool:
        return len(await driver.completed()) >= 2

    await eventually_true(committed_twice, "two checkpoints completed", 60)
    async with Etcd(etcd_config) as etcd:
        request = await request_savepoint(etcd, driver.keys, stop=True, expires_in_s=60)
        answer = await await_savepoint(etcd, driver.keys, request, 30)
    await asyncio.wait_for(run, 30)
    assert answer.status == "completed"
    assert answer.path is not None
    *_, checkpoint, savepoint = await driver.completed()
    assert (savepoint.kind, savepoint.path) == ("savepoint", answer.path)
    assert driver.committed_by(savepoint), "the savepoint committed output"
    duplicated = driver.committed_after(checkpoint)
    shutil.rmtree(answer.path.removeprefix("file://"))
    before = driver.output_files()

    stage = WatchedStage()
    message = await driver.refused_behind(stage)
    assert stage.restored == []
    assert driver.output_files() == before
    assert f"is checkpoint {checkpoint.checkpoint_id} ({checkpoint.path})" in message
    assert f"savepoint {savepoint.checkpoint_id} ({answer.path}): snapshot file" in message
    assert "_metadata: missing" in message

    stage = WatchedStage()
    await driver.run(stage, accept_duplicates=True)
    assert stage.restored == [checkpoint.path]
    driver.assert_output_written_again_after(duplicated)


async def test_with_every_checkpoint_damaged_the_driver_refuses_to_start_empty(driver: Driver) -> None:
    older, latest = await driver.fail_after_two_checkpoints()
    Path(_private_file(latest)).unlink()
    with open(_private_file(older), "r+b") as truncated:
        truncated.truncate(5)
    # Retention may not have removed a third yet when the job gave up: damaged too.
    for earlier in (await driver.completed())[:-2]:
        with contextlib.suppress(FileNotFoundError), open(_private_file(earlier), "r+b") as truncated:
            truncated.truncate(5)
    before = sorted(p.name for p in driver.out.iterdir())

    stage = WatchedStage()
    with pytest.raises(NoUsableCheckpointError) as raised:
        await driver.run(stage, restart_strategy("fixed-delay", attempts=3, delay_s=0))

    assert stage.restored == [], "no task started"
    message = str(raised.value)
    assert f"checkpoint {latest.checkpoint_id} ({latest.path}): snapshot file" in message
    assert f"{_private_file(latest)}: missing" in message
    assert f"checkpoint {older.checkpoint_id} ({older.path}): snapshot file" in message
    assert f"{_private_file(older)}: truncated" in message
    assert "--from-savepoint PATH" in message
    assert "--fresh" in message
    assert sorted(p.name for p in driver.out.iterdir()) == before, "nothing read again from the start"


async def test_a_checkpoint_a_task_finds_damaged_is_marked_and_the_relaunch_refuses_the_one_before(
    driver: Driver,
) -> None:
    _older, latest = await driver.fail_after_two_checkpoints()
    stage = WatchedStage(damage=True)
    message = await driver.refused_behind(stage, restart_strategy("fixed-delay", attempts=3, delay_s=0))
    assert stage.restored == [latest.path], "one launch, then the refusal: no loop, no fallback"
    assert f"checkpoint {latest.checkpoint_id} ({latest.path}): marked unusable: a task found" in message


async def test_a_checkpoint_a_task_finds_damaged_is_marked_and_the_relaunch_restores_the_one_before(
    driver: Driver,
) -> None:
    older, latest = await driver.fail_after_two_checkpoints()
    duplicated = driver.committed_by(latest)

    stage = WatchedStage(damage=True)
    master = await driver.run(
        stage, restart_strategy("fixed-delay", attempts=3, delay_s=0), accept_duplicates=True
    )

    assert stage.restored == [latest.path, older.path], "one restart, not a loop on the damaged one"
    assert master.restarts == 1
    driver.assert_output_written_again_after(duplicated)


async def test_the_mark_outlives_the_driver_that_made_it(driver: Driver) -> None:
    older, latest = await driver.fail_after_two_checkpoints()
    duplicated = driver.committed_by(latest)
    with pytest.raises(JobGaveUpError, match="checksum mismatch"):
        await driver.run(WatchedStage(damage=True, repair=True))
    damaged = _private_file(latest)
    assert await driver.unusable() == {
        latest.checkpoint_id: f"a task found snapshot file {damaged}: checksum mismatch"
    }

    # A new driver: the latest checkpoint reads back intact now, but a task found it
    # damaged once, and it is not restored again.
    stage = WatchedStage()
    await driver.run(stage, accept_duplicates=True)
    assert stage.restored == [older.path]
    driver.assert_output_written_again_after(duplicated)


async def test_a_named_savepoint_a_task_finds_damaged_ends_the_run(driver: Driver) -> None:
    _, latest = await driver.fail_after_two_checkpoints()
    stage = WatchedStage(damage=True)
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch \\(found by a task restoring it\\)"):
        await driver.run(
            stage, restart_strategy("fixed-delay", attempts=3, delay_s=0), from_savepoint=latest.path
        )
    assert stage.restored == [latest.path], "no fallback from a savepoint the user named"
    assert await driver.unusable() == {}


async def test_a_named_savepoint_the_driver_finds_damaged_ends_the_run_before_any_launch(
    driver: Driver,
) -> None:
    _, latest = await driver.fail_after_two_checkpoints()
    flip_byte(_private_file(latest), 5)
    stage = WatchedStage()
    with pytest.raises(SnapshotCorruptError, match=f"{_private_file(latest)}: checksum mismatch$"):
        await driver.run(
            stage, restart_strategy("fixed-delay", attempts=3, delay_s=0), from_savepoint=latest.path
        )
    assert stage.restored == []
    assert await driver.unusable() == {}, "a path the user named is not the job's to mark"
