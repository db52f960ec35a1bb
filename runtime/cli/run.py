"""`lockgate run JOB`: run a job locally on Spark (`local[P]`), with an embedded etcd
under `.lockgate/` unless `--etcd` names one. The driver's code, on this machine.
`lockgate run --local JOB`: the same run with its tasks as threads of this process
(the in-process runner), no JVM and no Spark: the job author's fastest loop."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.runtime.cli.etcd_options import RUN_FILE, WORK_DIR
from lockgate.runtime.cli.run_lock import exclusive_run
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_options import add_security, config_of
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.leadership import LEASE_TTL_S
from lockgate.runtime.driver import option_types as types
from lockgate.runtime.driver.drive import drive
from lockgate.runtime.driver.options import JobSettings, OptionError, add_job_options, settings_from
from lockgate.runtime.driver.preflight import preflight
from lockgate.runtime.driver.progress import Totals
from lockgate.runtime.driver.termination import until_terminated
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import RunResult, Stage, refuse_an_earlier_run
from lockgate.runtime.snapshot.storage import CheckpointStorage


def register(commands: Any) -> None:
    command = commands.add_parser("run", help="run a job locally on Spark")
    add_job_options(command)
    etcd = command.add_argument_group("etcd")
    etcd.add_argument("--etcd", help="etcd endpoints (default: start an embedded etcd)")
    add_security(etcd)  # TLS and the job's etcd user, for an etcd of the team's own
    command.add_argument(
        "--local",
        action="store_true",
        help="run the tasks as threads of this process: no JVM, no Spark, the same job master, etcd, "
        "checkpoints and savepoints (a savepoint or checkpoint of either kind of run restores in the "
        "other); the fastest way to try a job",
    )
    command.add_argument(
        "--master",
        help="Spark master (default: local[P]); e.g. local-cluster[2,1,1024] for executors in their own JVMs",
    )
    command.add_argument(
        "--spark-ui",
        nargs="?",
        const=4040,
        type=types.port,
        metavar="PORT",
        help="serve Spark's web UI on this port (default 4040, the next free one if taken; 0: any free "
        "port) and print its address; off by default: its web server adds to start-up",
    )
    command.set_defaults(handler=run_command)


@contextlib.contextmanager
def _etcd(arguments: argparse.Namespace) -> Iterator[tuple[EtcdConfig, Callable[[], None]]]:
    """The job's etcd, and what to call before it is first used: an embedded etcd
    starts while Spark's JVM does (about a second of start-up saved), and is waited
    for after."""
    if arguments.etcd:
        yield config_of(arguments.etcd, arguments), lambda: None
        return
    server = EtcdServer(WORK_DIR.resolve() / "etcd", dies_with_parent=True)  # a SIGKILLed run takes it along
    server.launch()
    try:
        yield EtcdConfig.from_url(server.endpoint), server.wait_healthy
    finally:
        server.stop()


async def _refuse_an_earlier_run(settings: JobSettings, config: EtcdConfig) -> None:
    """Decided before Spark's JVM starts: a new run of a job id with an earlier run's
    checkpoints must be told what to do with them (`--resume`, `--fresh`)."""
    async with Etcd(config) as etcd:
        storage = CheckpointStorage(settings.checkpoint_dir)
        await refuse_an_earlier_run(
            CompletedCheckpointStore(etcd, settings.keys, storage, settings.checkpoint.retained)
        )


_LOCAL = re.compile(r"^local(?:\[(?P<threads>\d+)\])?$")


def _check_slots(master: str | None, parallelism: int) -> None:
    """A barrier stage needs all P task slots at once: a local master with fewer
    would wait for them forever."""
    match = _LOCAL.match(master or "")
    if match is not None and int(match["threads"] or 1) < parallelism:
        raise OptionError(
            f"--master {master} has {int(match['threads'] or 1)} task slot(s); the job's {parallelism} "
            f"tasks run as one barrier stage and need {parallelism}: use local[{parallelism}] (the default)"
        )


def local_task_limit() -> int:
    """The most tasks a run on this machine takes: each is a Python worker (a process
    on Spark, a thread with --local) with its own state backend and channels to every
    other; far more than the cores only waits, and thousands exhaust the machine."""
    return max(64, 8 * (os.cpu_count() or 1))


def _check_machine(master: str | None, parallelism: int) -> None:
    """A run on this machine (a local master, or --local) with more tasks than it can hold."""
    local = master is None or _LOCAL.match(master) is not None
    limit = local_task_limit()
    if local and parallelism > limit:
        raise OptionError(
            f"parallelism {parallelism} is more tasks than this machine runs ({os.cpu_count()} cores: "
            f"at most {limit} here, each a Python worker with its own state and channels): run with "
            f"-p {limit} or fewer, or on a cluster (--master k8s://…, or a StreamingJob)"
        )


SPARK_ONLY = {"master": "--master", "spark_ui": "--spark-ui", "task_metrics_ports": "--task-metrics-ports"}
"""Flags of a run on Spark that a --local run has nothing to apply to."""


def _refuse_spark_only_flags(arguments: argparse.Namespace) -> None:
    given = [flag for name, flag in SPARK_ONLY.items() if getattr(arguments, name) is not None]
    if given:
        raise OptionError(
            f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for a run on Spark; --local runs "
            "the tasks as threads of this process: drop --local to run on Spark, or drop "
            f"{' and '.join(given)}"
        )


def run_command(arguments: argparse.Namespace) -> int:
    # Job modules are found from the current directory, as `python -m` would.
    sys.path.insert(0, os.getcwd())
    if arguments.local:
        _refuse_spark_only_flags(arguments)
    if not arguments.etcd and arguments.takeover_wait is None:
        # The embedded etcd is this directory's alone (the run lock): a coordinator it
        # still records is a killed run's, which a successor replaces within its TTL.
        arguments.takeover_wait = LEASE_TTL_S + 2.0
    settings = settings_from(arguments, WORK_DIR, fresh_by_default=True)
    _check_machine(None if arguments.local else arguments.master, settings.parallelism)
    if not arguments.local:
        _check_slots(arguments.master, settings.parallelism)
    if arguments.etcd_user and not arguments.etcd:
        raise OptionError("--etcd-user goes with --etcd: the embedded etcd has no users")
    if not arguments.local:
        from lockgate.runtime.spark.java import check_java  # noqa: PLC0415 - as `_stage`'s imports

        check_java()  # Spark's launcher would say it only once the JVM fails to start
    # Before etcd or Spark start; an embedded etcd is not started just to record a refusal.
    preflight(settings, config_of(arguments.etcd, arguments) if arguments.etcd else None)
    with exclusive_run(WORK_DIR):
        RUN_FILE.unlink(missing_ok=True)  # a killed run's: this run writes its own once etcd serves
        result, totals = _run_here(settings, arguments)
    restored = f", restored from {result.restored_from}" if result.restored_from else ""
    restarts = f", {result.restarts} restart(s)" if result.restarts else ""
    # Sources read again after a restart, so what was read is this launch's; what the
    # sinks committed is the run's output.
    read = f"read {totals.read:,} records" + (" in its last launch" if result.restarts else "")
    print(
        f"finished: {read}, committed {result.committed_records:,} to the sinks; "
        f"last checkpoint {totals.last_checkpoint}{restored}{restarts}"
    )
    if result.savepoint is not None:
        print(f"stopped with savepoint {result.savepoint}")
        print(result.savepoint)
    return 0


@contextlib.contextmanager
def _stage(settings: JobSettings, arguments: argparse.Namespace) -> Iterator[tuple[Stage, str, list[str]]]:
    """Where the tasks run: Spark's barrier stage (its JVM starts here), or this
    process's threads; with how to say so, and what to print after."""
    if arguments.local:
        try:
            yield ThreadStage(), "in this process (--local)", []
        finally:
            RUN_FILE.unlink(missing_ok=True)
        return
    # Imported only here: a --local run never loads pyspark.
    from lockgate.runtime.spark import BarrierStage  # noqa: PLC0415
    from lockgate.runtime.spark.session import command_session  # noqa: PLC0415

    # Slots for every parallelism this machine runs: `lockgate rescale` scales up in place.
    master = arguments.master or f"local[{max(settings.parallelism, local_task_limit())}]"
    with command_session(
        master,
        f"lockgate-{settings.keys.job}",
        on_stop=lambda: RUN_FILE.unlink(missing_ok=True),
        task_failures_logged=arguments.debug,
        ui_port=arguments.spark_ui,
        spark_warnings=arguments.debug or arguments.verbose > 0,
    ) as spark:
        ui = [f"Spark UI at {spark.sparkContext.uiWebUrl}"] if arguments.spark_ui is not None else []
        yield BarrierStage(spark), f"on {master}", ui


def _run_here(settings: JobSettings, arguments: argparse.Namespace) -> tuple[RunResult, Totals]:
    """The job on Spark or on this process's threads, beside its etcd (embedded, or
    `--etcd`), to its end."""
    keys, p = settings.keys, settings.parallelism
    # Only an etcd that may hold an earlier run is waited for before the JVM starts.
    may_hold_an_earlier_run = bool(arguments.etcd) or (WORK_DIR / "etcd").exists()
    with _etcd(arguments) as (etcd_config, etcd_ready):
        # A run from a savepoint starts from it, whatever checkpoints the job id has (as the job master does).
        starts_empty = settings.earlier_checkpoints == "refuse" and settings.from_savepoint is None
        if starts_empty and may_hold_an_earlier_run:
            etcd_ready()
            run_with_bounded_shutdown(_refuse_an_earlier_run(settings, etcd_config))
        with _stage(settings, arguments) as (stage, where, notes):
            etcd_ready()
            # Other commands find the run's etcd by this record: only once it serves.
            endpoints = ",".join(etcd_config.endpoints)
            record = {"etcd": endpoints, "namespace": keys.namespace, "job_id": keys.job, "pid": os.getpid()}
            RUN_FILE.write_text(json.dumps(record))
            print(
                f"running {settings.entrypoint} as {keys.namespace}/{keys.job} at parallelism {p} {where}",
                flush=True,
            )
            for note in notes:
                print(note, flush=True)
            return run_with_bounded_shutdown(
                until_terminated(drive(settings, etcd_config, stage, progress=sys.stderr))
            )
