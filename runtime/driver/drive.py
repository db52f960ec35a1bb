"""Running a job with its settings: the job master, beside it the autoscaler (when
enabled) and a progress display, and the job's final status in etcd (for the
operator and the CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import TextIO

from lockgate.runtime.autoscaling.loop import Autoscaler
from lockgate.runtime.clock import SystemClock
from lockgate.runtime.coordination.cancellation import cancel_and_wait, within
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.job_status import StatusHeartbeat
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore
from lockgate.runtime.driver.options import JobSettings
from lockgate.runtime.driver.progress import Totals, read_totals, show_progress
from lockgate.runtime.engine.job_master import JobMaster, RunResult, Stage, ends_the_job
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.job_metrics import JobMetrics
from lockgate.runtime.metrics.serving import PortRange, serve
from lockgate.runtime.snapshot.storage import CheckpointStorage


def job_spec(settings: JobSettings, etcd: EtcdConfig) -> JobSpec:
    return JobSpec(
        entrypoint=settings.entrypoint,
        keys=settings.keys,
        parallelism=settings.parallelism,
        state=StateConfig(
            settings.state_backend,  # type: ignore[arg-type]
            settings.local_dir,
            settings.max_parallelism,
            incremental=settings.incremental,
        ),
        control_plane=etcd,
        secret=secrets.token_bytes(32),
        args=tuple(settings.args.items()),
        mode=settings.mode,  # type: ignore[arg-type]
        unaligned_after_s=settings.unaligned_after_s,
        bounded=settings.bounded,
        liveness_timeout_s=settings.exchange_timeout_s,
        in_flight_target_s=settings.in_flight_target_s,
        metrics_ports=settings.task_metrics_ports,
        metrics_host=settings.metrics_bind,
    )


async def drive(
    settings: JobSettings, etcd_config: EtcdConfig, stage: Stage, progress: TextIO | None = None
) -> tuple[RunResult, Totals]:
    """Run the job to its end; raises what ended it otherwise (after recording it)."""
    if settings.trust.key is not None:
        settings.trust.key.persist()  # a local job's first run: its key, before it signs anything
    storage = CheckpointStorage(settings.checkpoint_dir)
    metrics = JobMetrics(settings.keys, settings.checkpoint, settings.parallelism)
    master = JobMaster(
        job_spec(settings, etcd_config),
        stage,
        storage,
        settings.checkpoint,
        savepoint_dir=settings.savepoint_dir,
        listener=metrics,
        takeover_wait_s=settings.takeover_wait_s,
        allow_non_restored_state=settings.allow_non_restored_state,
        accept_duplicate_output=settings.accept_duplicate_output,
        trust=settings.trust,
    )
    async with contextlib.AsyncExitStack() as stack:
        if settings.metrics_port is not None:
            ports = PortRange(settings.metrics_port, settings.metrics_port)
            server = serve(metrics.registry, ports, settings.metrics_bind)
            if server is not None:
                stack.callback(server.close)  # after etcd's connection closes, as it was opened before
                if progress is not None:
                    print(
                        f"metrics: http://{_reachable(settings.metrics_bind)}:{server.port}/metrics",
                        file=progress,
                        flush=True,
                    )
        etcd = await stack.enter_async_context(Etcd(etcd_config))
        store = CompletedCheckpointStore(etcd, settings.keys, storage, settings.checkpoint.retained)
        status = StatusHeartbeat(
            etcd, settings.keys, settings.parallelism, lambda: master.restarts, driver=settings.driver_name
        )
        beside: list[asyncio.Task[None]] = []
        if settings.autoscaler is not None:
            autoscaler = Autoscaler(etcd, settings.keys, settings.autoscaler, master, SystemClock())
            beside.append(asyncio.create_task(autoscaler.run(), name="autoscaler"))
        if progress is not None:
            beside.append(
                asyncio.create_task(
                    show_progress(
                        etcd,
                        settings.keys,
                        store,
                        progress,
                        restored=lambda: master.restored_from,
                        first_launch=lambda: master.first_launch,
                    ),
                    name="progress",
                )
            )
        try:
            result = await master.run(
                settings.restart_strategy(),
                from_savepoint=settings.from_savepoint,
                earlier_checkpoints=settings.earlier_checkpoints,
                # `running` only once this driver leads the job, at the launch's parallelism.
                coordinating=lambda: status.start(master.spec.parallelism),
            )
        except Exception as error:
            if ends_the_job(error):
                await status.finish("failed", failure=error)
            else:  # a failure the restart strategy never saw: the driver is lost, as a killed one is
                status.abandon()
            raise
        finally:
            await cancel_and_wait(beside, "stopping the autoscaler and the progress display")
        await status.finish("finished" if result.savepoint is None else "stopped", savepoint=result.savepoint)
        if result.savepoint is not None:
            await requests_read(etcd, settings.keys)
        return result, await read_totals(etcd, settings.keys, store, master.first_launch)


REQUESTS_READ_WITHIN_S = 5.0
"""How long a run that stopped with a savepoint waits for its requester to read the
result before it ends (taking an embedded etcd, and the result, with it)."""


async def requests_read(etcd: KeyValueStore, keys: JobKeys, within_s: float = REQUESTS_READ_WITHIN_S) -> None:
    """Until no savepoint request is left: a requester deletes its request once it read
    the result (`lockgate savepoint`, the operator); one that does not is waited for
    `within_s` at most."""

    async def none_left() -> None:
        rows, revision = await etcd.get_prefix_at(keys.savepoint_requests)
        left = {key for key, _ in rows}
        if not left:
            return
        async for event in etcd.watch_prefix(keys.savepoint_requests, revision + 1):
            if event.deleted:
                left.discard(event.key)
            else:
                left.add(event.key)
            if not left:
                return

    with contextlib.suppress(TimeoutError):
        await within(none_left(), within_s)


def _reachable(bind: str) -> str:
    """An address a user on this host opens to reach a listener bound to `bind`."""
    return "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
