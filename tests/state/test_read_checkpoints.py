"""Reading a retained checkpoint of a job run on RocksDB with incremental
checkpoints: native RocksDB files, read by the code a restore reads them with."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.state import ReadOptions, SavepointWriter, open_snapshot

from tests.state import jobs

COUNT = 300


async def test_a_native_incremental_checkpoint_reads_as_the_state_the_job_ended_with(tmp_path: Path) -> None:
    spec = JobSpec(
        "tests.state.jobs:every_kind_generated",
        JobKeys("test", "kinds"),
        2,
        StateConfig("rocksdb", tmp_path / "local", 128, incremental=True),
        InMemoryStore(),
        secret=b"s" * 32,
        args=(("count", str(COUNT)), ("output", f"file://{tmp_path}/out")),
        bounded=True,
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(
        spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.05, timeout_s=30, retained=3)
    )
    await asyncio.wait_for(master.run(restart_strategy("none")), 120)

    job = tmp_path / "checkpoints" / "kinds"
    last = max((p for p in job.iterdir() if p.name.startswith("chk-")), key=lambda p: int(p.name[4:]))
    saved = open_snapshot(f"file://{last}", unsigned=True)
    kinds = saved.operator("kinds")
    assert {s.format for s in kinds.subtasks} == {"native"}
    expected = jobs.expected_rows(jobs.records(COUNT))
    for state in ("count", "parities", "total", "mean"):
        found = {tuple(row.values()) for row in saved.rows("kinds", state)}
        assert found == expected[state], state
    seen = {tuple(row.values()) for row in saved.rows("kinds", "seen")}
    assert seen == expected["seen"]
    last_n = {(r["key"], r["value"]) for r in saved.rows("kinds", "last", ReadOptions(now_ms=0))}
    assert last_n == expected["last"]
    # Its final watermark fired every event-time timer before the last checkpoint.
    assert list(saved.rows("kinds", "_timers.event_time")) == []

    # Rewritten as a savepoint: canonical files, the same rows.
    key = SnapshotKey(secrets.token_bytes(32), "test")
    SavepointWriter.from_snapshot(saved).write(f"file://{tmp_path}/savepoint", key)
    rewritten = open_snapshot(f"file://{tmp_path}/savepoint", key)
    assert {s.format for s in rewritten.operator("kinds").subtasks} == {"canonical"}
    for state in ("count", "seen", "parities", "total", "mean"):
        assert {tuple(r.values()) for r in rewritten.rows("kinds", state)} == expected[state], state
