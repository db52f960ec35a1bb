"""Restoring a snapshot into a job whose vertices do not claim all of its state: a
renamed source is refused, naming the state, before any task starts — not restarted
at offset 0 — unless the user allows the unclaimed state to be dropped."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections import Counter
from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, StreamEnvironment, read_committed
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.restore_check import unclaimed_state
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.handles import OperatorStateHandle
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SubtaskState, VertexState
from lockgate.runtime.snapshot.storage import CheckpointStorage, FileRef

from tests.exactness import final_sums
from tests.jobs.counting import running_sum

COUNT = 3000
KEYS = 7
CONFIG = CheckpointConfig(interval_s=0.05, timeout_s=30, retained=2)


class CountingStage(ThreadStage):
    def __init__(self) -> None:
        super().__init__()
        self.launches = 0

    def run(self, spec: JobSpec) -> None:
        self.launches += 1
        super().run(spec)


class Runs:
    """Runs of the running sum under one job id, its source named as each run says."""

    def __init__(self, etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path) -> None:
        self.etcd_config, self.keys, self.tmp_path = etcd_config, keys, tmp_path
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
        # One output for every run: a sink's state names the files it has yet to commit there.
        self.out = tmp_path / "out"

    def spec(self, source_name: str) -> JobSpec:
        return JobSpec(
            entrypoint="tests.jobs.configurable:running_sum",
            keys=self.keys,
            parallelism=2,
            state=StateConfig("rocksdb", self.tmp_path / "local", 32),
            control_plane=self.etcd_config,
            secret=secrets.token_bytes(32),
            args=(
                ("output", f"file://{self.out}"),
                ("count", str(COUNT)),
                ("keys", str(KEYS)),
                ("source_name", source_name),
            ),
            bounded=True,
        )

    async def run(self, source_name: str, stage: CountingStage, **options: object) -> None:
        from_savepoint = options.pop("from_savepoint", None)
        master = JobMaster(self.spec(source_name), stage, self.storage, CONFIG, **options)  # type: ignore[arg-type]
        await master.run(
            restart_strategy("fixed-delay", attempts=2, delay_s=0), from_savepoint=from_savepoint
        )  # type: ignore[arg-type]

    async def latest(self) -> str:
        async with Etcd(self.etcd_config) as etcd:
            completed = await CompletedCheckpointStore(etcd, self.keys, self.storage, 2).all()
        return completed[-1].path

    def output(self) -> tuple[Counter[int], dict[int, int]]:
        """How often each record was written, and each key's final sum."""
        records = read_committed(f"file://{self.out}")
        return Counter(r["n"] for r in records), final_sums(records)


@pytest.fixture
async def runs(etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path) -> Runs:
    runs = Runs(etcd_config, keys, tmp_path)
    await runs.run("numbers", CountingStage())
    return runs


async def test_a_renamed_source_is_refused_naming_its_state_before_any_task_starts(runs: Runs) -> None:
    latest = await runs.latest()
    before = sorted(runs.out.iterdir())
    stage = CountingStage()
    with pytest.raises(
        ValueError, match=r"holds state no vertex of this job claims: 'numbers' \(operator state\)"
    ) as refused:
        await runs.run("digits", stage, from_savepoint=latest)
    assert type(refused.value).__name__ == "NonRestoredStateError"
    assert "'digits' (source)" in str(refused.value)
    assert "--allow-non-restored-state" in str(refused.value)
    assert stage.launches == 0, "refused before any task started, and not restarted"
    assert sorted(runs.out.iterdir()) == before


async def test_allowing_non_restored_state_drops_only_the_unclaimed_state(
    runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    latest = await runs.latest()
    with caplog.at_level(logging.WARNING):
        await runs.run("digits", CountingStage(), from_savepoint=latest, allow_non_restored_state=True)
    assert (
        "without the state no vertex of the job claims, which is dropped: 'numbers' (operator state)"
        in caplog.text
    )
    counts, finals = runs.output()
    assert counts == Counter(2 * list(range(COUNT))), "the renamed source starts empty: it reads all again"
    first = {k: sum(range(k, COUNT, KEYS)) for k in range(KEYS)}
    assert finals == {k: 2 * first[k] for k in range(KEYS)}, "the sums' keyed state, claimed, was restored"


async def test_a_snapshot_with_every_state_claimed_restores_without_a_word(
    runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    latest = await runs.latest()
    with caplog.at_level(logging.WARNING):
        await runs.run("numbers", CountingStage(), from_savepoint=latest)
    assert "no vertex of the job claims" not in caplog.text
    counts, _ = runs.output()
    assert counts == Counter(range(COUNT)), "the source resumed at its end: nothing read twice"


def test_state_of_a_kind_the_same_named_vertex_does_not_keep_is_unclaimed() -> None:
    env = StreamEnvironment("job")
    running_sum(env, GeneratorSource(10), "file:///out")
    operator = OperatorStateHandle(FileRef("sum/0/operator", 0, 0, hashlib.sha256(b"").hexdigest()))
    # "sum" held operator state (it was a source once); "out" kept nothing at all.
    metadata = CheckpointMetadata(
        "job",
        1,
        "savepoint",
        0,
        {
            "sum": VertexState(1, 32, (SubtaskState(0, operator=operator),)),
            "out": VertexState(1, 32, (SubtaskState(0),)),
        },
    )
    assert unclaimed_state(metadata, env.graph()) == ["'sum' (operator state)"]
