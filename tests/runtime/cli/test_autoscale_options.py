"""`lockgate run --autoscale MIN:MAX` and spec.autoscaler: one setting, the model's
defaults and bounds, refused naming the flag or field before anything starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lockgate.runtime.autoscaling.decision import ScalingPolicy

from tests.runtime.cli.refusals import ARGS, WORD_COUNT, manifest, refusal, settings


def test_autoscaling_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert settings(tmp_path, WORD_COUNT, *ARGS).autoscaler is None


def test_the_flags_give_the_decisions_policy_with_the_models_defaults(tmp_path: Path) -> None:
    policy = settings(tmp_path, WORD_COUNT, *ARGS, "-p", "2", "--autoscale", "1:6").autoscaler
    assert policy is not None
    assert policy.scale_down_utilization == pytest.approx(0.4)
    assert policy == ScalingPolicy(
        max_parallelism=6,
        key_groups=128,
        min_parallelism=1,
        target_utilization=0.7,
        scale_down_utilization=policy.scale_down_utilization,
        catch_up_s=300.0,
        window_s=60.0,
        stabilization_s=30.0,
        scale_down_delay_s=600.0,
    )
    tuned = settings(
        tmp_path,
        WORD_COUNT,
        *ARGS,
        "--autoscale",
        "2:4",
        "--autoscale-window",
        "20s",
        "--scale-down-delay",
        "2m",
        "--autoscale-utilization",
        "0.5",
        "--catch-up-duration",
        "1m",
    ).autoscaler
    assert tuned is not None
    assert (tuned.min_parallelism, tuned.max_parallelism, tuned.window_s, tuned.stabilization_s) == (
        2,
        4,
        20,
        10,
    )
    assert (tuned.scale_down_delay_s, tuned.target_utilization, tuned.catch_up_s) == (120, 0.5, 60)


def test_a_manifests_autoscaler_is_taken_and_a_flag_overrides_it(tmp_path: Path) -> None:
    spec = {
        "replicas": 3,
        "maxParallelism": 64,
        "autoscaler": {"enabled": True, "minReplicas": 2, "scaleDownDelay": "5m", "targetUtilization": 0.6},
    }
    job = manifest(tmp_path, spec)
    policy = settings(tmp_path, job).autoscaler
    assert policy is not None
    assert (policy.min_parallelism, policy.max_parallelism, policy.key_groups) == (2, 64, 64)
    assert (policy.scale_down_delay_s, policy.target_utilization) == (300.0, 0.6)
    flagged = settings(tmp_path, job, "--scale-down-delay", "30s").autoscaler
    assert flagged is not None
    assert flagged.scale_down_delay_s == 30.0


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (
            ["--autoscale", "4:2"],
            r"argument --autoscale: must be MIN:MAX, whole numbers with 1 <= MIN <= MAX",
        ),
        (["--autoscale", "0:2"], r"argument --autoscale: must be MIN:MAX.* got '0:2'"),
        (["--autoscale", "3"], r"argument --autoscale: must be MIN:MAX.* got '3'"),
        (["--autoscale", "1:x"], r"argument --autoscale: must be MIN:MAX.* got '1:x'"),
        (
            ["--autoscale", "1:4", "--autoscale-window", "0"],
            r"argument --autoscale-window: must be more than 0",
        ),
        (
            ["--autoscale", "1:4", "--scale-down-delay", "soon"],
            r"argument --scale-down-delay: 'soon' is not a duration",
        ),
        (
            ["--autoscale", "1:4", "--catch-up-duration=-1s"],
            r"argument --catch-up-duration: '-1s' is not a duration",
        ),
        (
            ["--autoscale", "1:4", "--autoscale-utilization", "0"],
            r"argument --autoscale-utilization: must be a number from 0.1 to 1, got '0'",
        ),
        (
            ["--autoscale", "1:4", "--autoscale-utilization", "nan"],
            r"argument --autoscale-utilization: must be",
        ),
        (
            ["--scale-down-delay", "1m"],
            r"--scale-down-delay set\(s\) the autoscaler, which is off: enable it with --autoscale MIN:MAX",
        ),
        (
            ["-p", "5", "--autoscale", "1:4"],
            r"parallelism 5 \(--parallelism\) is outside --autoscale's 1:4: the job starts at it",
        ),
        (
            ["--autoscale", "1:64", "--max-parallelism", "32"],
            r"--autoscale maximum 64 exceeds max parallelism 32 \(--max-parallelism\).* "
            r"give --max-parallelism \(spec.maxParallelism\) at least 64",
        ),
    ],
)
def test_a_bad_autoscaler_option_is_refused_naming_the_flag(
    tmp_path: Path, flags: list[str], complaint: str
) -> None:
    message = refusal(tmp_path, WORD_COUNT, *ARGS, *flags)
    assert re.search(complaint, message), message


@pytest.mark.parametrize(
    ("autoscaler", "complaint"),
    [
        ({"targetUtilization": 1.5}, r"spec\.autoscaler\.targetUtilization"),
        (
            {"minReplicas": 5, "maxReplicas": 3},
            r"spec\.autoscaler\.minReplicas 5 exceeds spec\.autoscaler\.maxReplicas 3",
        ),
        (
            {"enabled": True, "minReplicas": 3},
            r"spec\.replicas 2 is outside spec\.autoscaler's \[3, maxParallelism\]",
        ),
        (
            {"enabled": True, "maxReplicas": 200},
            r"spec\.autoscaler\.maxReplicas 200 exceeds spec\.maxParallelism 64",
        ),
        ({"stabilizationWindow": "0s"}, r"spec\.autoscaler\.stabilizationWindow must be more than 0 seconds"),
    ],
)
def test_a_bad_autoscaler_field_is_refused_naming_it(
    tmp_path: Path, autoscaler: dict[str, object], complaint: str
) -> None:
    message = refusal(tmp_path, manifest(tmp_path, {"maxParallelism": 64, "autoscaler": autoscaler}))
    assert re.search(complaint, message), message
