"""The options of a job run, shared by the driver (`python -m lockgate.runtime.driver`)
and `lockgate run`: from the command line, a StreamingJob manifest, and defaults."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass
from pathlib import Path

from lockgate.runtime.api.connectors import JobIdentity
from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.api.validation import validate_connectors
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.driver.manifest import load_manifest
from lockgate.runtime.engine.job_master import EarlierCheckpoints
from lockgate.runtime.engine.liveness import DEFAULT_LIVENESS_TIMEOUT_S, check_liveness_timeout
from lockgate.runtime.engine.restart import STRATEGIES, RestartStrategy, restart_strategy
from lockgate.runtime.keygroups import default_max_parallelism
from lockgate.runtime.metrics.serving import PortRange

DEFAULTS: dict[str, object] = {
    "parallelism": 2,
    "checkpoint_interval": 5.0,
    "state_backend": "rocksdb",
    "mode": "exactly-once",
    "namespace": "default",
}


def add_job_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "job", metavar="JOB", help="the job's entrypoint, module:function, or a StreamingJob manifest file"
    )
    command.add_argument("--parallelism", "-p", type=int, help="subtasks per vertex (default 2)")
    command.add_argument("--max-parallelism", type=int, help="key groups (default: Flink's rule from P)")
    command.add_argument("--checkpoint-interval", type=float, help="seconds (default 5)")
    command.add_argument("--checkpoint-timeout", type=float, default=600.0, help="seconds (default 600)")
    command.add_argument(
        "--tolerable-failures", type=int, default=0, help="failed checkpoints in a row (default 0)"
    )
    command.add_argument(
        "--min-pause", type=float, default=0.0, help="seconds between a checkpoint's end and the next (0)"
    )
    command.add_argument(
        "--max-concurrent", type=int, default=1, help="checkpoints in flight at once (default 1)"
    )
    command.add_argument(
        "--incremental",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="RocksDB checkpoints upload only new SST files (default); --no-incremental: full snapshots",
    )
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
    command.add_argument(
        "--takeover-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="when another driver still coordinates the job (a killed one's lease lingers), wait this "
        "long for it to go instead of failing at once (default 0)",
    )
    command.add_argument(
        "--exchange-timeout",
        type=float,
        default=DEFAULT_LIVENESS_TIMEOUT_S,
        metavar="SECONDS",
        help="a task whose exchange peer sent nothing, not even a heartbeat, for this long fails, and "
        f"the job restarts (default {DEFAULT_LIVENESS_TIMEOUT_S:g}; heartbeats go every tenth of it)",
    )
    command.add_argument(
        "--driver-name",
        default=socket.gethostname(),
        help="who this driver is in the job's status (default: the host name, a pod's name)",
    )
    command.add_argument("--namespace", help="the job's namespace (default: default)")
    command.add_argument(
        "--bounded",
        action="store_true",
        help="finish when every source reached the end of its input, after a final checkpoint",
    )
    command.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE", help="a job argument")
    metrics = command.add_argument_group("Prometheus metrics (default: not served)")
    metrics.add_argument("--metrics-port", type=int, help="the driver's /metrics port (0: any free port)")
    metrics.add_argument(
        "--task-metrics-ports",
        type=PortRange.parse,
        metavar="FIRST[-LAST]",
        help="each task serves /metrics on the first free port of this range, e.g. 9250-9259",
    )
    restart = command.add_argument_group("restarts (Flink's strategies)")
    restart.add_argument("--restart-strategy", choices=STRATEGIES, default="fixed-delay")
    restart.add_argument(
        "--restart-attempts", type=int, help="fixed-delay: attempts (3); failure-rate: max failures"
    )
    restart.add_argument("--restart-delay", type=float, help="seconds before a restart (1)")
    restart.add_argument("--restart-max-delay", type=float, help="exponential-backoff: the cap (60)")
    restart.add_argument(
        "--restart-failure-interval", type=float, help="failure-rate: the window in seconds (60)"
    )


@dataclass(frozen=True)
class JobSettings:
    entrypoint: str
    args: dict[str, str]
    keys: JobKeys
    parallelism: int
    max_parallelism: int
    incremental: bool
    state_backend: str
    mode: str
    bounded: bool
    checkpoint: CheckpointConfig
    checkpoint_dir: str
    savepoint_dir: str
    local_dir: Path
    from_savepoint: str | None
    earlier_checkpoints: EarlierCheckpoints
    arguments: argparse.Namespace
    driver_name: str = ""
    takeover_wait_s: float = 0.0
    exchange_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S
    metrics_port: int | None = None
    task_metrics_ports: PortRange | None = None

    def restart_strategy(self) -> RestartStrategy:
        a = self.arguments
        return restart_strategy(
            a.restart_strategy,
            attempts=a.restart_attempts,
            delay_s=a.restart_delay,
            max_delay_s=a.restart_max_delay,
            interval_s=a.restart_failure_interval,
        )


def job_args(pairs: list[str]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"--arg {pair!r} must be KEY=VALUE")
        args[key] = value
    return args


def _apply_manifest(arguments: argparse.Namespace) -> dict[str, str]:
    """When JOB is a manifest: its values for the options not given; its args."""
    if not (arguments.job.endswith((".yaml", ".yml")) or Path(arguments.job).is_file()):
        return {}
    manifest = load_manifest(Path(arguments.job))
    arguments.job = manifest.entrypoint
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
    return dict(manifest.args)


def settings_from(arguments: argparse.Namespace, work_dir: Path, *, fresh_by_default: bool) -> JobSettings:
    """Resolve the options; imports and validates the job. `fresh_by_default`: a new
    run refuses an earlier run's checkpoints (a local run) instead of resuming
    from them (a driver relaunched by the operator)."""
    if arguments.takeover_wait < 0:
        raise ValueError(f"--takeover-wait must be 0 or more seconds, got {arguments.takeover_wait}")
    check_liveness_timeout(arguments.exchange_timeout, "--exchange-timeout")
    args = _apply_manifest(arguments)
    for name, default in DEFAULTS.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, default)
    args.update(job_args(arguments.arg))
    graph = build_graph(arguments.job, arguments.job_id, args)
    keys = JobKeys(arguments.namespace, arguments.job_id or graph.name)
    validate_connectors(graph, JobIdentity(keys.namespace, keys.job))  # before Spark starts
    p = arguments.parallelism
    work = work_dir.resolve()
    if arguments.fresh:
        earlier: EarlierCheckpoints = "discard"
    else:
        earlier = "refuse" if fresh_by_default else "resume"
    settings = JobSettings(
        entrypoint=arguments.job,
        args=args,
        keys=keys,
        parallelism=p,
        max_parallelism=arguments.max_parallelism or default_max_parallelism(p),
        incremental=arguments.incremental,
        state_backend=arguments.state_backend,
        mode=arguments.mode,
        bounded=arguments.bounded,
        checkpoint=CheckpointConfig(
            interval_s=arguments.checkpoint_interval,
            timeout_s=arguments.checkpoint_timeout,
            min_pause_s=arguments.min_pause,
            max_concurrent=arguments.max_concurrent,
            tolerable_failures=arguments.tolerable_failures,
            retained=arguments.retained,
        ),
        checkpoint_dir=arguments.checkpoint_dir or f"file://{work}/checkpoints",
        savepoint_dir=arguments.savepoint_dir or f"file://{work}/savepoints",
        local_dir=work / "state" / keys.job,
        from_savepoint=arguments.from_savepoint,
        earlier_checkpoints=earlier,
        arguments=arguments,
        driver_name=arguments.driver_name,
        takeover_wait_s=arguments.takeover_wait,
        exchange_timeout_s=arguments.exchange_timeout,
        metrics_port=arguments.metrics_port,
        task_metrics_ports=arguments.task_metrics_ports,
    )
    settings.restart_strategy()  # bad restart options fail here, before anything starts
    return settings
