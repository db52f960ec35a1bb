"""Two jobs write one directory: one fails and restarts through the engine, and the
other's pending epoch survives to be committed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lockgate.runtime import FileSink, GeneratorSource, JobIdentity, StreamEnvironment, read_committed
from lockgate.runtime.coordination.in_memory_store import InMemoryStore

from tests.jobs.counting import FailOnce, failing_running_sum
from tests.runtime.connectors.subtasks import open_writer
from tests.runtime.engine.harness import Run, run_job

COUNT = 8_000


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith((".", "_")))


async def test_a_restarting_job_leaves_another_jobs_pending_epoch_in_a_shared_directory(
    keys, tmp_path: Path
) -> None:
    # The subject is the output directory, not etcd: on the in-memory control plane,
    # a checkpoint every 20 ms does not depend on how fast a loaded machine's etcd is.
    control_plane = InMemoryStore()
    out = f"file://{tmp_path}/out"
    other = JobIdentity(keys.namespace, f"{keys.job}-other")
    crashed = open_writer(FileSink(out), launch=1, job=other)
    crashed.write({"other": 1})
    other_checkpoint = crashed.pre_commit(3)  # completed; the other job crashed before committing

    env = StreamEnvironment("sum")
    source = GeneratorSource(COUNT, keys=13, partitions=4, rate=8_000)
    fail = FailOnce(at=COUNT // 4, flag=str(tmp_path / "failed-once"), committed_dir=str(tmp_path / "out"))
    failing_running_sum(env, source, out, fail)
    run = Run(2, interval_s=0.02, batch_size=32)
    with pytest.raises(RuntimeError, match="injected failure"):
        await run_job(control_plane, keys, tmp_path, env.graph(), run)
    assert await run_job(control_plane, keys, tmp_path, env.graph(), run) > 0

    assert _hidden(tmp_path / "out") == [other_checkpoint[0][0]], (
        "this job left nothing; the other's survives"
    )
    mine = [r for r in read_committed(out) if "n" in r]
    assert sorted(r["n"] for r in mine) == list(range(COUNT)), "nothing lost, nothing twice"
    mine_name = re.compile(
        rf"part~{keys.namespace}~{keys.job}~\d+-(?P<launch>\d+)-[0-9a-f]{{8}}-\d+-chk\d+\.jsonl"
    )
    names = [p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith((".", "_"))]
    matches = [mine_name.fullmatch(name) for name in names]
    assert None not in matches, f"every committed file names this job: {names}"
    launches = {int(m["launch"]) for m in matches if m is not None}
    assert len(launches) == 2, f"and the launch that wrote it: {names}"

    open_writer(FileSink(out), launch=2, job=other).recover(other_checkpoint)
    assert {"other": 1} in read_committed(out)
    assert _hidden(tmp_path / "out") == []
