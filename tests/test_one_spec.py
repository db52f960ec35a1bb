"""One spec, resolved once: the same StreamingJob manifest gives the same job
settings through `lockgate run job.yaml` and through the operator (its driver
arguments and ConfigMap, read by the driver's own parser). The defaults, bounds and
descriptions are the model's (lockgate.runtime.spec.model), nowhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lockgate.operator.crd import streamingjob_crd
from lockgate.operator.driver_pod import (
    SNAPSHOT_KEY_DIR,
    SNAPSHOT_KEY_FILE,
    Cluster,
    Launch,
    driver_arguments,
)
from lockgate.operator.naming import JobNames
from lockgate.operator.owned import config_map
from lockgate.operator.spec import parse_spec
from lockgate.runtime.cli import parser as lockgate_parser
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.driver.__main__ import parser as driver_parser
from lockgate.runtime.driver.options import SPEC_OPTIONS, JobSettings, settings_from
from lockgate.runtime.engine.restart import STRATEGIES, restart_strategy
from lockgate.runtime.keygroups import default_max_parallelism
from lockgate.runtime.snapshot.snapshot_key import new_key_text
from lockgate.runtime.spec.durations import parse_duration
from lockgate.runtime.spec.model import StreamingJobSpec, field_at
from pydantic.alias_generators import to_camel

NAMES = JobNames("default", "sums")
CLUSTER = Cluster("http://127.0.0.1:2379", "file:///tmp/lockgate-checkpoints")
MINIMAL: dict[str, Any] = {"image": "lockgate:1", "job": {"entrypoint": "tests.jobs.configurable:word_count"}}
SPECS = {
    "minimal": MINIMAL,
    "every setting": {
        **MINIMAL,
        "job": {**MINIMAL["job"], "allowNonRestoredState": True, "acceptDuplicateOutput": True},
        "replicas": 3,
        "maxParallelism": 64,
        "stateBackend": "heap",
        "checkpointing": {
            "interval": 7,  # a whole number of seconds, as YAML writes it
            "timeout": "2m",
            "minPause": "250ms",
            "mode": "at-least-once",
            "maxConcurrent": 2,
            "tolerableFailures": 4,
            "retained": 5,
            "incremental": False,
        },
        "restartStrategy": {"type": "fixed-delay", "attempts": 7, "delay": "3s"},
        "autoscaler": {
            "enabled": True,
            "minReplicas": 2,
            "maxReplicas": 8,
            "targetUtilization": 0.6,
            "catchUpDuration": "2m",
            "stabilizationWindow": 30,
            "scaleDownDelay": "5m",
        },
    },
    "failure-rate": {
        **MINIMAL,
        "restartStrategy": {"type": "failure-rate", "attempts": 2, "failureInterval": "90s", "delay": "0"},
    },
}


def _spec_settings(settings: JobSettings) -> dict[str, Any]:
    """What the spec decides (not where this run keeps its files, or who it is)."""
    return {
        "entrypoint": settings.entrypoint,
        "args": settings.args,
        "keys": settings.keys,
        "parallelism": settings.parallelism,
        "max_parallelism": settings.max_parallelism,
        "state_backend": settings.state_backend,
        "mode": settings.mode,
        "incremental": settings.incremental,
        "checkpoint": settings.checkpoint,
        "allow_non_restored_state": settings.allow_non_restored_state,
        "accept_duplicate_output": settings.accept_duplicate_output,
        "restart_strategy": settings.restart_strategy(),
        "autoscaler": settings.autoscaler,
    }


def _by_lockgate_run(spec: dict[str, Any], work: Path) -> JobSettings:
    manifest = work / "job.yaml"
    manifest.write_text(yaml.safe_dump({"kind": "StreamingJob", "metadata": {"name": "sums"}, "spec": spec}))
    arguments = lockgate_parser().parse_args(["run", str(manifest)])
    return settings_from(arguments, work, fresh_by_default=True)


def _by_the_operator(spec: dict[str, Any], work: Path) -> JobSettings:
    """The operator's launch: the ConfigMap's manifest and the driver pod's arguments,
    at this test's paths instead of the pod's mounts, through the driver's parser."""
    parsed = parse_spec(spec)
    launch = Launch(1, parsed.max_parallelism or default_max_parallelism(parsed.replicas), "latest")
    (work / "job.yaml").write_text(config_map(NAMES, spec, CLUSTER)["data"]["job.yaml"])
    (work / "key").write_text(new_key_text())
    mounted = {"/etc/lockgate/job.yaml": str(work / "job.yaml")}
    mounted[f"{SNAPSHOT_KEY_DIR}/{SNAPSHOT_KEY_FILE}"] = str(work / "key")
    flags = [mounted.get(flag, flag) for flag in driver_arguments(NAMES, parsed, launch, CLUSTER)]
    arguments = driver_parser().parse_args([*flags, "--etcd", CLUSTER.etcd_endpoints])
    return settings_from(arguments, work, fresh_by_default=False)


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_the_same_manifest_gives_the_same_settings_through_lockgate_run_and_the_operator(
    spec: dict[str, Any], tmp_path: Path
) -> None:
    """Failed before: `lockgate run` took a 5 s interval and fixed-delay restarts
    where the operator's driver took 10 s and exponential-backoff."""
    (tmp_path / "run").mkdir()
    (tmp_path / "operator").mkdir()
    run = _spec_settings(_by_lockgate_run(spec, tmp_path / "run"))
    operator = _spec_settings(_by_the_operator(spec, tmp_path / "operator"))
    assert run == operator


def test_a_run_without_a_manifest_takes_the_models_defaults(tmp_path: Path) -> None:
    arguments = lockgate_parser().parse_args(["run", MINIMAL["job"]["entrypoint"]])
    without = _spec_settings(settings_from(arguments, tmp_path, fresh_by_default=True))
    with_minimal = _spec_settings(_by_lockgate_run(MINIMAL, tmp_path))
    assert without.pop("keys").job == "configurable"
    assert with_minimal.pop("keys").job == "sums"
    assert without == with_minimal
    defaults = StreamingJobSpec.model_validate({"job": MINIMAL["job"]})
    assert without["checkpoint"].interval_s == defaults.checkpointing.interval_s == 10.0
    assert without["checkpoint"].retained == defaults.checkpointing.retained
    assert without["restart_strategy"] == restart_strategy(defaults.restart_strategy.type)


def test_the_coordinator_and_the_restart_strategies_default_to_what_the_crd_says() -> None:
    """Failed before: the coordinator kept 1 checkpoint where a job keeps 2, and a
    restart's delays were defaults of the restart strategy's own, which the CRD and
    `lockgate run --help` did not show."""
    spec = streamingjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    checkpointing = spec["properties"]["checkpointing"]["properties"]
    config = CheckpointConfig()
    for name in (
        "interval_s",
        "timeout_s",
        "min_pause_s",
        "max_concurrent",
        "tolerable_failures",
        "retained",
    ):
        assert getattr(config, name) == _value(checkpointing[to_camel(name.removesuffix("_s"))]["default"]), (
            name
        )
    restart = spec["properties"]["restartStrategy"]["properties"]
    for kind in STRATEGIES:
        strategy = restart_strategy(kind)
        assert strategy.delay_s == _value(restart["delay"]["default"])
        assert strategy.max_delay_s == _value(restart["maxDelay"]["default"])
        assert strategy.interval_s == _value(restart["failureInterval"]["default"])
    assert restart_strategy("fixed-delay").attempts == 3
    assert f"({restart_strategy('fixed-delay').attempts})" in restart["attempts"]["description"]
    assert f"({restart_strategy('failure-rate').attempts})" in restart["attempts"]["description"]


def _value(default: Any) -> float:
    """A CRD default: a duration as the CRD writes it, or a number."""
    return parse_duration(default) if isinstance(default, str) else float(default)


@pytest.mark.parametrize("option", SPEC_OPTIONS)
def test_every_spec_flag_says_what_its_field_says(option: str) -> None:
    """Its help is the field's description; a flag cannot drift from the field."""
    (run,) = [
        a for a in lockgate_parser()._subparsers._group_actions[0].choices["run"]._actions if a.dest == option
    ]  # type: ignore[union-attr]
    description = " ".join((field_at(SPEC_OPTIONS[option]).description or "").split())
    assert description, f"{SPEC_OPTIONS[option]} has no description in the model"
    assert run.help is not None
    assert run.help.startswith(description)
