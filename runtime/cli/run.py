"""`lockgate run JOB`: run a job locally on Spark (`local[P]`), with an embedded etcd
under `.lockgate/` unless `--etcd` names one."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.cli.manifest import load_manifest
from lockgate.runtime.cli.progress import read_totals, show_progress
from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.job_master import EarlierCheckpoints, RunResult, run_once
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.keygroups import default_max_parallelism
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import BarrierStage, local_session

WORK_DIR = Path(".lockgate")
RUN_FILE = WORK_DIR / "run.json"
"""Where a local run records its etcd, so other commands in this directory find it."""


def register(commands: Any) -> None:
    command = commands.add_parser("run", help="run a job locally on Spark")
    command.add_argument(
        "job", metavar="JOB", help="the job's entrypoint, module:function, or a StreamingJob manifest file"
    )
    command.add_argument("--parallelism", "-p", type=int, help="subtasks per vertex (default 2)")
    command.add_argument("--max-parallelism", type=int, help="key groups (default: Flink's rule from P)")
    command.add_argument("--checkpoint-interval", type=float, help="seconds (default 5)")
    command.add_argument("--checkpoint-timeout", type=float, default=600.0, help="seconds (default 600)")
    command.add_argument("--checkpoint-dir", help="checkpoint storage URL (default: .lockgate/checkpoints)")
    command.add_argument("--retained", type=int, default=2, help="completed checkpoints kept (default 2)")
    command.add_argument("--savepoint-dir", help="where savepoints go (default: .lockgate/savepoints)")
    command.add_argument("--state-backend", choices=["rocksdb", "heap"], help="default: rocksdb")
    command.add_argument("--mode", choices=["exactly-once", "at-least-once"], help="default: exactly-once")
    command.add_argument(
        "--from-savepoint", metavar="PATH", help="restore from this savepoint or retained checkpoint"
    )
    command.add_argument(
        "--fresh",
        action="store_true",
        help="start from empty state, deleting the checkpoints of an earlier run of this job id",
    )
    command.add_argument("--job-id", help="the job's id in etcd and storage (default: the job's name)")
    command.add_argument("--namespace", help="the job's namespace (default: default)")
    command.add_argument(
        "--bounded",
        action="store_true",
        help="finish when every source reached the end of its input, after a final checkpoint",
    )
    command.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="a job argument")
    command.add_argument("--etcd", help="etcd endpoints (default: start an embedded etcd)")
    command.set_defaults(handler=run_command)


def _job_args(pairs: list[str]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"--arg {pair!r} must be KEY=VALUE")
        args[key] = value
    return args


@contextlib.contextmanager
def _etcd(arguments: argparse.Namespace) -> Iterator[EtcdConfig]:
    if arguments.etcd:
        yield EtcdConfig.from_url(arguments.etcd)
        return
    server = EtcdServer(WORK_DIR.resolve() / "etcd")
    server.start()
    try:
        yield EtcdConfig.from_url(server.endpoint)
    finally:
        server.stop()


DEFAULTS: dict[str, object] = {
    "parallelism": 2,
    "checkpoint_interval": 5.0,
    "state_backend": "rocksdb",
    "mode": "exactly-once",
    "namespace": "default",
}


def _resolve(arguments: argparse.Namespace) -> dict[str, str]:
    """Fill unset options from the manifest (when JOB is one), then the defaults;
    returns the job's args (the manifest's, overridden by --arg)."""
    args: dict[str, str] = {}
    if arguments.job.endswith((".yaml", ".yml")) or Path(arguments.job).is_file():
        manifest = load_manifest(Path(arguments.job))
        arguments.job = manifest.entrypoint
        args.update(manifest.args)
        from_manifest = {
            "parallelism": manifest.replicas,
            "max_parallelism": manifest.max_parallelism,
            "checkpoint_interval": manifest.interval_s,
            "state_backend": manifest.state_backend,
            "mode": manifest.mode,
            "namespace": manifest.namespace,
            "job_id": manifest.name,
        }
        for name, value in from_manifest.items():
            if getattr(arguments, name) is None and value is not None:
                setattr(arguments, name, value)
    for name, default in DEFAULTS.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, default)
    args.update(_job_args(arguments.arg))
    return args


def run_command(arguments: argparse.Namespace) -> int:
    # Job modules are found from the current directory, as `python -m` would.
    sys.path.insert(0, os.getcwd())
    args = _resolve(arguments)
    graph = build_graph(arguments.job, arguments.job_id, args)  # fails fast on a bad job
    keys = JobKeys(arguments.namespace, arguments.job_id or graph.name)
    p = arguments.parallelism
    max_parallelism = arguments.max_parallelism or default_max_parallelism(p)
    work = WORK_DIR.resolve()
    checkpoint_dir = arguments.checkpoint_dir or f"file://{work}/checkpoints"
    config = CheckpointConfig(
        interval_s=arguments.checkpoint_interval,
        timeout_s=arguments.checkpoint_timeout,
        retained=arguments.retained,
    )
    with _etcd(arguments) as etcd_config:
        spec = JobSpec(
            entrypoint=arguments.job,
            keys=keys,
            parallelism=p,
            state=StateConfig(arguments.state_backend, work / "state" / keys.job, max_parallelism),
            etcd=etcd_config,
            secret=secrets.token_bytes(32),
            args=tuple(args.items()),
            mode=arguments.mode,
            bounded=arguments.bounded,
        )
        RUN_FILE.write_text(
            json.dumps({"etcd": etcd_config.endpoints[0], "job_id": keys.job, "pid": os.getpid()})
        )
        spark = local_session(p, f"lockgate-{keys.job}")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            print(f"running {arguments.job} as {keys.namespace}/{keys.job} at parallelism {p} on local[{p}]")
            result = asyncio.run(_run(spec, CheckpointStorage(checkpoint_dir), config, arguments))
        finally:
            spark.stop()
            RUN_FILE.unlink(missing_ok=True)
    if result.savepoint is not None:
        print(f"stopped with savepoint {result.savepoint}")
        print(result.savepoint)
    return 0


async def _run(
    spec: JobSpec,
    storage: CheckpointStorage,
    config: CheckpointConfig,
    arguments: argparse.Namespace,
) -> RunResult:
    spark = local_session(spec.parallelism)
    savepoints = arguments.savepoint_dir or f"file://{WORK_DIR.resolve()}/savepoints"
    # A new run does not silently continue an earlier one's state.
    earlier: EarlierCheckpoints = "discard" if arguments.fresh else "refuse"
    async with Etcd(spec.etcd) as etcd:
        store = CompletedCheckpointStore(etcd, spec.keys, storage, config.retained)
        display = asyncio.create_task(show_progress(etcd, spec.keys, store))
        try:
            result = await run_once(
                spec,
                BarrierStage(spark),
                storage,
                config,
                savepoint_dir=savepoints,
                from_savepoint=arguments.from_savepoint,
                earlier_checkpoints=earlier,
            )
        finally:
            display.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await display
        totals = await read_totals(etcd, spec.keys, store)
    restored = f", restored from {result.restored_from}" if result.restored_from else ""
    print(
        f"finished: read {totals.read:,} records, wrote {totals.written:,}; "
        f"last checkpoint {totals.last_checkpoint}{restored}"
    )
    return result
