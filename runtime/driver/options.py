"""The options of a job run, shared by the driver (`python -m lockgate.runtime.driver`)
and `lockgate run`: from the command line, a StreamingJob manifest, and the spec's
model (`lockgate.runtime.spec.model`), which is where each option's default, bounds
and description are written: a flag that sets a spec field is derived from it."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from lockgate.runtime.api.entrypoint import default_job_name, module_entrypoint
from lockgate.runtime.autoscaling.decision import ScalingPolicy
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.errors import ACCEPT_DUPLICATES_FIELD
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.restore_point import Trust
from lockgate.runtime.driver import option_types as types
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.job_master import EarlierCheckpoints
from lockgate.runtime.engine.liveness import DEFAULT_LIVENESS_TIMEOUT_S, check_liveness_timeout
from lockgate.runtime.engine.restart import RestartStrategy, restart_strategy
from lockgate.runtime.keygroups import default_max_parallelism
from lockgate.runtime.metrics.serving import PortRange
from lockgate.runtime.snapshot.snapshot_key import SnapshotKeyError, key_for_local_job, read_key
from lockgate.runtime.spec.durations import format_duration
from lockgate.runtime.spec.manifest import load_manifest
from lockgate.runtime.spec.model import FieldKind, field_at, kind_of, resolved_document
from lockgate.runtime.storage_url import check_storage_url
from pydantic.fields import FieldInfo

SPEC_OPTIONS = {
    "parallelism": "spec.replicas",
    "max_parallelism": "spec.maxParallelism",
    "state_backend": "spec.stateBackend",
    "allow_non_restored_state": "spec.job.allowNonRestoredState",
    "accept_duplicate_output": ACCEPT_DUPLICATES_FIELD,
    "checkpoint_interval": "spec.checkpointing.interval",
    "checkpoint_timeout": "spec.checkpointing.timeout",
    "min_pause": "spec.checkpointing.minPause",
    "mode": "spec.checkpointing.mode",
    "aligned_checkpoint_timeout": "spec.checkpointing.alignedCheckpointTimeout",
    "max_concurrent": "spec.checkpointing.maxConcurrent",
    "tolerable_failures": "spec.checkpointing.tolerableFailures",
    "retained": "spec.checkpointing.retained",
    "incremental": "spec.checkpointing.incremental",
    "checkpoint_dir": "spec.checkpointing.storage",
    "savepoint_dir": "spec.savepoints.dir",
    "restart_strategy": "spec.restartStrategy.type",
    "restart_attempts": "spec.restartStrategy.attempts",
    "restart_delay": "spec.restartStrategy.delay",
    "restart_max_delay": "spec.restartStrategy.maxDelay",
    "restart_failure_interval": "spec.restartStrategy.failureInterval",
    "autoscale_window": "spec.autoscaler.stabilizationWindow",
    "scale_down_delay": "spec.autoscaler.scaleDownDelay",
    "autoscale_utilization": "spec.autoscaler.targetUtilization",
    "catch_up_duration": "spec.autoscaler.catchUpDuration",
}
"""The options that set a field of the spec, by that field: each flag's type, bounds,
help and default are the field's. The rest of the spec (image, pods, upgrade mode,
...) is the operator's: valid, read, unused here."""
AUTOSCALE_FIELDS = {
    "autoscaler_enabled": "spec.autoscaler.enabled",
    "min_replicas": "spec.autoscaler.minReplicas",
    "max_replicas": "spec.autoscaler.maxReplicas",
}
"""What `--autoscale MIN:MAX` sets, at once."""
MANIFEST_FIELDS = {
    "job_id": "metadata.name",
    "namespace": "metadata.namespace",
    **SPEC_OPTIONS,
    **AUTOSCALE_FIELDS,
}
"""Every option a manifest sets, by the field that sets it."""


class OptionError(ValueError):
    """Options that are each valid but do not fit together; the message names their sources."""


def add_job_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "job",
        metavar="JOB",
        help="the job: module:function, path/to/job.py:function, or a StreamingJob manifest file",
    )
    _spec_option(command, "--parallelism", "-p")
    for name in SPEC_OPTIONS:
        if name not in (*_RESTART_OPTIONS, *_AUTOSCALER_OPTIONS, "parallelism"):
            _spec_option(command, "--" + name.replace("_", "-"))
    command.add_argument(
        "--from-savepoint",
        metavar="PATH",
        type=types.storage_url,
        help="restore from this savepoint or retained checkpoint",
    )
    command.add_argument(
        "--import-unsigned-savepoint",
        action="store_true",
        help="restore the --from-savepoint although this job's snapshot key did not sign it (a savepoint "
        "of another job or from before signing): its state is unpickled, so only one you trust. Every "
        "snapshot this run takes is signed",
    )
    command.add_argument(
        "--snapshot-key-file",
        type=Path,
        metavar="FILE",
        help="the job's snapshot key (64 hex digits), which signs every snapshot and without which none is "
        "restored (default: made on the first run under the work directory, .lockgate/keys/)",
    )
    command.add_argument(
        "--fresh",
        action="store_true",
        help="start from empty state, deleting the checkpoints of an earlier run of this job id",
    )
    command.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest retained checkpoint of an earlier run of this job id "
        "(refused when there is none)",
    )
    command.add_argument(
        "--job-id", type=types.job_id, help="the job's id in etcd and storage (default: the job's name)"
    )
    command.add_argument(
        "--takeover-wait",
        type=types.seconds,
        metavar="SECONDS",
        help="when another driver still coordinates the job (a killed one's record lingers until its "
        "heartbeat has stood still for the TTL), wait this long for it to go instead of failing at once "
        "(default 0; with `lockgate run`'s embedded etcd, the TTL and a little more)",
    )
    command.add_argument(
        "--in-flight-target",
        type=types.seconds,
        default=DEFAULT_IN_FLIGHT_TARGET_S,
        metavar="SECONDS",
        help="how long a record may wait in a keyed exchange, in its sender's frame and its channel: "
        "frames are sized to each channel's rate to keep to it (Flink's buffer debloating). Lower for "
        f"lower latency; 0 for full frames always (default {DEFAULT_IN_FLIGHT_TARGET_S:g}, or 50ms)",
    )
    command.add_argument(
        "--exchange-timeout",
        type=types.seconds,
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
    command.add_argument("--namespace", type=types.namespace, help="the job's namespace (default: default)")
    command.add_argument(
        "--bounded",
        action="store_true",
        help="treat every source as finite: finish when each reached the end of its input, after a final "
        "checkpoint (a job whose sources all know they are finite finishes without it)",
    )
    command.add_argument(
        "--arg", action="append", type=types.job_arg, default=[], metavar="KEY=VALUE", help="a job argument"
    )
    metrics = command.add_argument_group("Prometheus metrics (default: not served)")
    metrics.add_argument(
        "--metrics-port", type=types.port, help="the driver's /metrics port (0: any free port)"
    )
    metrics.add_argument(
        "--task-metrics-ports",
        type=types.port_range,
        metavar="FIRST[-LAST]",
        help="each task serves /metrics on the first free port of this range, e.g. 9250-9259",
    )
    metrics.add_argument(
        "--metrics-bind",
        type=types.listen_address,
        default="127.0.0.1",
        metavar="ADDRESS",
        help="where the driver's and the tasks' /metrics listen (default 127.0.0.1: this host only; "
        "0.0.0.0 on a cluster, where Prometheus scrapes each pod's address)",
    )
    restart = command.add_argument_group("restarts (Flink's strategies)")
    for name in _RESTART_OPTIONS:
        _spec_option(restart, "--" + name.replace("_", "-"))
    autoscaling = command.add_argument_group("autoscaling (spec.autoscaler; default: off)")
    autoscaling.add_argument(
        "--autoscale",
        action=_Autoscale,
        type=types.replica_range,
        metavar="MIN:MAX",
        help=f"{_described('spec.autoscaler.enabled')} Between MIN and MAX subtasks "
        "(spec.autoscaler.minReplicas, maxReplicas); --parallelism is the one it starts at",
    )
    for name in _AUTOSCALER_OPTIONS:
        _spec_option(autoscaling, "--" + name.replace("_", "-"))
    command.set_defaults(**dict.fromkeys(AUTOSCALE_FIELDS))


class _Autoscale(argparse.Action):
    """`--autoscale MIN:MAX`: enabled, with those bounds."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        namespace.autoscaler_enabled = True
        namespace.min_replicas, namespace.max_replicas = values


def _described(path: str) -> str:
    return " ".join((field_at(path).description or "").split())


_RESTART_OPTIONS = [name for name, path in SPEC_OPTIONS.items() if path.startswith("spec.restartStrategy.")]
_AUTOSCALER_OPTIONS = [name for name, path in SPEC_OPTIONS.items() if path.startswith("spec.autoscaler.")]
_DURATIONS = ("duration", "positive duration")
_LOCAL_DEFAULTS = {
    "checkpoint_dir": "default: .lockgate/checkpoints",
    "savepoint_dir": "default: .lockgate/savepoints",
}


def _spec_option(group: Any, flag: str, *aliases: str) -> None:
    """A flag that sets a field of the spec, as the model declares the field: what it
    takes, its bounds, its description and its default. Unset, it is None: the
    manifest's value or the model's default comes in when the options are resolved."""
    name = flag.removeprefix("--").replace("-", "_")
    field = field_at(SPEC_OPTIONS[name])
    (kind, spec_kind), default = kind_of(field), field.get_default(call_default_factory=True)
    shown = _LOCAL_DEFAULTS.get(name)
    if shown is None and default is not None:
        shown = f"default {_shown(default, spec_kind)}"
    text = " ".join((field.description or "").split())
    options: dict[str, Any] = {"help": f"{text} ({shown})" if shown else text}
    if kind is bool and default is True:
        options["action"] = argparse.BooleanOptionalAction
    elif kind is bool:
        options.update(action="store_true", default=None)
    elif get_origin(kind) is Literal:
        options["choices"] = get_args(kind)
    else:
        options["type"] = _flag_type(kind, spec_kind, field)
        options["metavar"] = _METAVARS.get(spec_kind or "") or ("FRACTION" if kind is float else None)
    group.add_argument(flag, *aliases, **options)


def _shown(default: object, spec_kind: FieldKind | None) -> str:
    """A default as a manifest would write it."""
    if isinstance(default, bool):
        return str(default).lower()
    return format_duration(float(default)) if spec_kind in _DURATIONS else str(default)  # type: ignore[arg-type]


_METAVARS = {"duration": "DURATION", "positive duration": "DURATION", "storage url": "URL"}
_FLAG_TYPES = {
    "duration": types.seconds,
    "positive duration": types.positive_seconds,
    "storage url": types.storage_url,
}


def _flag_type(kind: Any, spec_kind: FieldKind | None, field: FieldInfo) -> Any:
    if spec_kind is not None:
        return _FLAG_TYPES[spec_kind]
    bounds = {type(m).__name__: m for m in field.metadata}
    if kind is int:
        return types.integer(bounds["Ge"].ge, bounds["Le"].le)
    if kind is float:
        return types.fraction(bounds["Ge"].ge, bounds["Le"].le)
    raise TypeError(f"no flag type for {kind!r}: give the field's kind one here")


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
    allow_non_restored_state: bool
    accept_duplicate_output: bool
    trust: Trust
    earlier_checkpoints: EarlierCheckpoints
    arguments: argparse.Namespace
    driver_name: str = ""
    takeover_wait_s: float = 0.0
    exchange_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S
    in_flight_target_s: float | None = DEFAULT_IN_FLIGHT_TARGET_S  # None: full frames always
    metrics_port: int | None = None
    task_metrics_ports: PortRange | None = None
    metrics_bind: str = "127.0.0.1"
    autoscaler: ScalingPolicy | None = None
    """Set when the autoscaler runs beside the job master."""
    unaligned_after_s: float | None = None
    """Exactly-once: alignment a keyed vertex waits before it goes unaligned (None: never)."""

    def restart_strategy(self) -> RestartStrategy:
        a = self.arguments
        return restart_strategy(
            a.restart_strategy,
            attempts=a.restart_attempts,
            delay_s=a.restart_delay,
            max_delay_s=a.restart_max_delay,
            failure_interval_s=a.restart_failure_interval,
        )


def is_manifest(job: str) -> bool:
    return job.endswith((".yaml", ".yml")) or (Path(job).is_file() and not job.endswith(".py"))


def _set_in(document: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document


def _resolve(arguments: argparse.Namespace, local: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Flags, then the manifest, then the model's defaults: the job's args, and where
    each option's value came from (a flag, a manifest field, the default).
    `local`: `lockgate run`; a driver the operator launched restores only what the
    operator's flags say (its manifest names the import on every launch)."""
    sources = {
        name: "--" + name.replace("_", "-") for name, value in vars(arguments).items() if value is not None
    }
    manifest = load_manifest(Path(arguments.job)) if is_manifest(arguments.job) else None
    if manifest is not None:
        arguments.job = manifest.spec.entrypoint
    written = {} if manifest is None else manifest.model_dump(by_alias=True, exclude_unset=True)
    resolved = resolved_document(manifest, arguments.job)
    for name, field in MANIFEST_FIELDS.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, _set_in(resolved, field))
            sources[name] = field if _set_in(written, field) is not None else "the default"
    args = {} if manifest is None else dict(manifest.spec.args)
    if manifest is not None and local:
        _import_from_manifest(arguments, sources, manifest.spec)
    args.update(dict(arguments.arg))
    return args, sources


def _import_from_manifest(arguments: argparse.Namespace, sources: dict[str, str], spec: Any) -> None:
    """The savepoint the manifest vouches for, as the operator's first launch restores it."""
    imported, field = spec.initial_savepoint_path, "spec.initialSavepointPath"
    if imported is None:
        imported, field = spec.job.import_unsigned_savepoint, "spec.job.importUnsignedSavepoint"
    starts_elsewhere = arguments.fresh or arguments.resume
    if imported is not None and arguments.from_savepoint is None and not starts_elsewhere:
        arguments.from_savepoint, arguments.import_unsigned_savepoint = imported, True
        sources["from_savepoint"] = field


def _check_together(arguments: argparse.Namespace, sources: dict[str, str]) -> None:
    p, max_p = arguments.parallelism, arguments.max_parallelism
    if max_p is not None and p > max_p:
        raise OptionError(
            f"parallelism {p} ({sources['parallelism']}) exceeds max parallelism {max_p} "
            f"({sources['max_parallelism']}): a subtask needs at least one key group"
        )
    delay, cap = arguments.restart_delay, arguments.restart_max_delay
    if arguments.restart_strategy == "exponential-backoff" and None not in (delay, cap) and delay > cap:
        raise OptionError(
            f"{sources['restart_delay']} {delay:g} s exceeds {sources['restart_max_delay']} {cap:g} s: "
            "the first delay of exponential-backoff must not exceed its cap"
        )
    if arguments.aligned_checkpoint_timeout is not None and arguments.mode != "exactly-once":
        raise OptionError(
            f"{sources['aligned_checkpoint_timeout']} applies to exactly-once checkpoints, but "
            f"{sources['mode']} is {arguments.mode} (which never aligns): drop one of them"
        )
    chosen = [flag for flag in ("fresh", "resume") if getattr(arguments, flag, False)]
    if arguments.from_savepoint is not None and sources["from_savepoint"].startswith("--"):
        chosen.append("from_savepoint")
    if len(chosen) > 1:
        raise OptionError(
            f"{' and '.join('--' + c.replace('_', '-') for c in chosen)} each say where the run starts: "
            "give one"
        )
    if arguments.import_unsigned_savepoint and arguments.from_savepoint is None:
        raise OptionError(
            "--import-unsigned-savepoint goes with --from-savepoint: it vouches for that savepoint"
        )
    _check_aligned_timeout(arguments, sources)
    for name in ("checkpoint_dir", "savepoint_dir"):
        url = getattr(arguments, name)
        if url is not None and sources[name].startswith("spec."):
            try:
                check_storage_url(url)
            except ValueError as error:
                raise OptionError(f"{sources[name]} {error}") from None


def _check_aligned_timeout(arguments: argparse.Namespace, sources: dict[str, str]) -> None:
    """An aligned-checkpoint timeout needs checkpoints that live long enough to reach it."""
    after, timeout = arguments.aligned_checkpoint_timeout, arguments.checkpoint_timeout
    if after is not None and timeout is not None and after >= timeout:
        raise OptionError(
            f"{sources['aligned_checkpoint_timeout']} {after:g} s is not below the checkpoint timeout "
            f"{timeout:g} s ({sources['checkpoint_timeout']}): every checkpoint would be aborted before "
            "it went unaligned; give a shorter aligned-checkpoint timeout (0s: always unaligned)"
        )


def _scaling_policy(
    arguments: argparse.Namespace, sources: dict[str, str], max_parallelism: int
) -> ScalingPolicy | None:
    """The autoscaler's settings when it is enabled; refuses its flags without it,
    and bounds that do not fit the job."""
    a = arguments
    if not a.autoscaler_enabled:
        given = [sources[n] for n in _AUTOSCALER_OPTIONS if sources.get(n, "").startswith("--")]
        if given:
            raise OptionError(
                f"{', '.join(given)} set(s) the autoscaler, which is off: enable it with --autoscale MIN:MAX "
                "(or spec.autoscaler.enabled)"
            )
        return None
    where = "--autoscale" if sources.get("autoscaler_enabled", "").startswith("--") else "spec.autoscaler"
    top = a.max_replicas or max_parallelism
    if top > max_parallelism:
        raise OptionError(
            f"{where} maximum {top} exceeds max parallelism {max_parallelism} "
            f"({sources['max_parallelism']}): a subtask needs at least one key group; give "
            f"--max-parallelism (spec.maxParallelism) at least {top}"
        )
    if not a.min_replicas <= a.parallelism <= top:
        raise OptionError(
            f"parallelism {a.parallelism} ({sources['parallelism']}) is outside {where}'s "
            f"{a.min_replicas}:{top}: the job starts at it, so give one within the range"
        )
    return ScalingPolicy(
        max_parallelism=top,
        key_groups=max_parallelism,
        min_parallelism=a.min_replicas,
        target_utilization=a.autoscale_utilization,
        scale_down_utilization=a.autoscale_utilization * SCALE_DOWN_SHARE,
        catch_up_s=a.catch_up_duration,
        window_s=a.autoscale_window,
        stabilization_s=a.autoscale_window / 2,
        scale_down_delay_s=a.scale_down_delay,
    )


SCALE_DOWN_SHARE = 4 / 7
"""A scale-down is considered while the job uses less than this share of the target
utilization (0.4 at the default 0.7)."""


def _trust(arguments: argparse.Namespace, work: Path, keys: JobKeys) -> Trust:
    """The job's snapshot key (read, or made on a local job's first run) and the
    savepoint the user vouched for."""
    try:
        if arguments.snapshot_key_file is not None:
            key = read_key(arguments.snapshot_key_file)
        else:
            key = key_for_local_job(work / "keys" / keys.namespace / f"{keys.job}.key")
    except SnapshotKeyError as error:
        raise OptionError(f"argument --snapshot-key-file: {error}") from None
    return Trust(key, arguments.from_savepoint if arguments.import_unsigned_savepoint else None)


def settings_from(arguments: argparse.Namespace, work_dir: Path, *, fresh_by_default: bool) -> JobSettings:
    """Resolve and check the options; the job itself is not imported here
    (`preflight.py` builds and checks it). `fresh_by_default`: a new run refuses an earlier run's
    checkpoints (a local run) instead of resuming from them (a driver relaunched by
    the operator)."""
    try:
        check_liveness_timeout(arguments.exchange_timeout, "--exchange-timeout")
    except ValueError as error:
        raise OptionError(str(error)) from None
    args, sources = _resolve(arguments, local=fresh_by_default)
    arguments.job = module_entrypoint(arguments.job)
    _check_together(arguments, sources)
    keys = JobKeys(arguments.namespace, arguments.job_id or default_job_name(arguments.job))
    p = arguments.parallelism
    work = work_dir.resolve()
    if arguments.fresh:
        earlier: EarlierCheckpoints = "discard"
    elif arguments.resume:
        earlier = "require"
    else:
        earlier = "refuse" if fresh_by_default else "resume"
    max_parallelism = arguments.max_parallelism or default_max_parallelism(p)
    settings = JobSettings(
        entrypoint=arguments.job,
        args=args,
        keys=keys,
        parallelism=p,
        max_parallelism=max_parallelism,
        incremental=arguments.incremental,
        state_backend=arguments.state_backend,
        mode=arguments.mode,
        unaligned_after_s=arguments.aligned_checkpoint_timeout,
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
        trust=_trust(arguments, work, keys),
        allow_non_restored_state=arguments.allow_non_restored_state,
        accept_duplicate_output=arguments.accept_duplicate_output,
        earlier_checkpoints=earlier,
        arguments=arguments,
        driver_name=arguments.driver_name,
        takeover_wait_s=arguments.takeover_wait or 0.0,
        exchange_timeout_s=arguments.exchange_timeout,
        in_flight_target_s=arguments.in_flight_target or None,  # 0: full frames
        metrics_port=arguments.metrics_port,
        task_metrics_ports=arguments.task_metrics_ports,
        metrics_bind=arguments.metrics_bind,
        autoscaler=_scaling_policy(arguments, sources, max_parallelism),
    )
    try:
        settings.restart_strategy()
    except ValueError as error:
        raise OptionError(f"restart options: {error}") from None
    return settings
