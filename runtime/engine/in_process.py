"""The in-process runner: a job's launches as threads of this process, under the
one job master — what `lockgate run --local`, `lockgate.testing.run_job` and the
engine's tests run.

`ThreadStage` is the job master's `Stage` without Spark: the tasks are the same
as on Spark (one `Task` per subtask, the TCP exchange with the launch's secret,
the launch's own line to the coordinator); only where they run differs.
`run_in_process` is one run without restarts, with a stop-with-savepoint asked
for when the caller says so, and the job's own exception raised as itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable
from typing import Any, Literal

from lockgate.runtime.coordination.ack_seal import ack_key
from lockgate.runtime.coordination.control_plane import open_control_plane
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.job_requests import request_savepoint
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.job_master import EarlierCheckpoints, JobGaveUpError, JobMaster, RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.local_runner import run_local
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.snapshot.storage import CheckpointStorage

Exchange = Literal["memory", "tcp"]


class ThreadStage:
    """`exchange="memory"`: the keyed exchange over in-memory queues instead of
    loopback TCP (the engine's tests of the channels compare both)."""

    def __init__(self, exchange: Exchange = "tcp") -> None:
        self._exchange: Exchange = exchange
        self._cancelled = threading.Event()  # each run replaces it with its own
        # Per window vertex, the records its subtasks dropped as late, over the launches that ended.
        self.late_records_dropped: Counter[str] = Counter()

    def run(self, spec: JobSpec) -> None:
        cancelled = self._cancelled = threading.Event()
        tasks = run_local(
            spec.graph(),
            [spec.task_config(i) for i in range(spec.parallelism)],
            lambda index: CheckpointControl(
                spec.control_plane, spec.keys, index, spec.launch, ack_key=ack_key(spec.secret)
            ),
            spec.restore,
            channel_capacity=spec.channel_capacity,
            trigger_revision=spec.trigger_revision,
            cancelled=cancelled,
            exchange=self._exchange,
            liveness=spec.liveness(),
            # Each task builds its own graph, as a Spark task imports the job itself:
            # a function object's attributes are never shared between subtasks.
            task_graph=lambda _index: spec.graph(),
        )
        for task in tasks:
            self.late_records_dropped.update({v: late.count for v, late in task.late_records_dropped.items()})

    # Threads cannot be killed: one in the job's code that does not return is
    # left behind after this long, rather than holding the run forever.
    stop_wait_s = 5.0

    def cancel(self) -> None:
        self._cancelled.set()

    # Threads of this process: a launch of any parallelism can start, and there is
    # nothing to give back.
    def reserve(self, parallelism: int, timeout_s: float) -> None:
        pass

    def release_surplus(self, parallelism: int) -> None:
        pass


async def run_in_process(
    spec: JobSpec,
    storage: CheckpointStorage,
    config: CheckpointConfig,
    *,
    savepoint_dir: str | None = None,
    from_savepoint: str | None = None,
    earlier_checkpoints: EarlierCheckpoints = "resume",
    allow_non_restored_state: bool = False,
    exchange: Exchange = "tcp",
    stop_when: Awaitable[None] | None = None,
    stage: ThreadStage | None = None,
) -> RunResult:
    """Run `spec` on threads to its end, once: no restarts. A failure of the job is
    raised as itself (with its own cause), not as the job master giving up. When
    `stop_when` completes first, the run is stopped with a savepoint, as `lockgate
    savepoint --stop` stops one, and the result names it. `stage`: the stage
    to run on, to read its counters after (else one of its own, on `exchange`)."""
    master = JobMaster(
        spec,
        stage or ThreadStage(exchange),
        storage,
        config,
        savepoint_dir=savepoint_dir,
        allow_non_restored_state=allow_non_restored_state,
    )
    strategy = restart_strategy("none")
    run = asyncio.ensure_future(
        master.run(strategy, from_savepoint=from_savepoint, earlier_checkpoints=earlier_checkpoints)
    )
    stop = None if stop_when is None else asyncio.ensure_future(stop_when)
    try:
        if stop is not None:
            either: set[asyncio.Future[Any]] = {run, stop}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if stop.done() and not run.done():
                async with open_control_plane(spec.control_plane) as store:
                    await request_savepoint(store, spec.keys, stop=True, expires_in_s=config.timeout_s)
        return await run
    except JobGaveUpError as gave_up:
        failure = gave_up.__cause__
        if failure is None:
            raise
        failure.__suppress_context__ = True  # the job's own error, as it raised it, with its cause
        raise failure  # noqa: B904 - its own cause is kept; the give-up is not news
    finally:
        # Cancelled (the caller's time is up): the tasks stop before this returns.
        for future in (run, stop):
            if future is not None:
                future.cancel()
        await asyncio.gather(run, *([stop] if stop is not None else []), return_exceptions=True)
