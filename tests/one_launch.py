"""One launch of a job on a given stage (Spark's, in these tests), no restarts: a
failure ends it with the job master's JobGaveUpError."""

from __future__ import annotations

from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.engine.job_master import JobMaster, RunResult, Stage
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.snapshot.storage import CheckpointStorage


async def run_once(
    spec: JobSpec,
    stage: Stage,
    storage: CheckpointStorage,
    config: CheckpointConfig,
    *,
    from_savepoint: str | None = None,
) -> RunResult:
    master = JobMaster(spec, stage, storage, config)
    return await master.run(restart_strategy("none"), from_savepoint=from_savepoint)
