"""The chart's alert rules and dashboard queries are valid PromQL (Prometheus's
own promtool checks them), and read only metrics Lockgate exports."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.helm.queries import alert_rules, dashboard, every_query, metric_names, panels

RUNTIME_AND_OPERATOR_METRICS = {
    # the driver's
    "lockgate_checkpoints_completed_total",
    "lockgate_checkpoints_failed_total",
    "lockgate_checkpoint_duration_seconds_bucket",
    "lockgate_checkpoint_size_bytes",
    "lockgate_last_checkpoint_completed_timestamp_seconds",
    "lockgate_checkpoint_interval_seconds",
    "lockgate_job_start_time_seconds",
    "lockgate_job_parallelism",
    "lockgate_restarts_total",
    # every task's
    "lockgate_records_in_total",
    "lockgate_records_out_total",
    "lockgate_backpressured_seconds_total",
    "lockgate_checkpoint_alignment_seconds_bucket",
    "lockgate_state_size_bytes",
    "lockgate_source_lag_records",
    "lockgate_source_lag_bytes",
    "lockgate_source_lag_known",
    "lockgate_busy_seconds_total",
    "lockgate_busy_ratio",
    "lockgate_records_in_per_second",
    "lockgate_records_out_per_second",
    # the operator's
    "lockgate_operator_reconciles_total",
    "lockgate_operator_jobs",
    "lockgate_job_phase",
    "lockgate_operator_upgrade_duration_seconds_bucket",
    "lockgate_operator_savepoint_duration_seconds_bucket",
}


def _promtool_check(rules: list[dict[str, object]], tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "lockgate", "rules": rules}]}))
    check = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_alert_rules_pass_promtool(tmp_path: Path) -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == {
        "LockgateCheckpointsFailing",
        "LockgateNoRecentCheckpoint",
        "LockgateRestartLoop",
        "LockgateJobFailed",
        "LockgateJobStuckProgressing",
    }
    _promtool_check(rules, tmp_path)


def test_a_job_stuck_progressing_is_alerted_on_naming_it_and_a_finished_change_is_not(tmp_path: Path) -> None:
    """Prometheus's own rule evaluation (promtool's rule tests) over the operator's
    `lockgate_job_phase`: `a` stays Upgrading, `b` upgrades for 5 minutes then runs."""
    (rule,) = [r for r in alert_rules() if r["alert"] == "LockgateJobStuckProgressing"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "lockgate", "rules": [rule]}]}))
    phase = 'lockgate_job_phase{{job_namespace="streams",job_id="{job}",phase="{phase}"}}'
    series = [
        {"series": phase.format(job="a", phase="Upgrading"), "values": "1x30"},
        {"series": phase.format(job="b", phase="Upgrading"), "values": "1x5 0x25"},
        {"series": phase.format(job="b", phase="Running"), "values": "0x5 1x25"},
    ]
    firing = {
        "exp_labels": {
            "severity": "warning",
            "job_namespace": "streams",
            "job_id": "a",
            "phase": "Upgrading",
        },
        "exp_annotations": {
            "summary": "StreamingJob streams/a has been Upgrading for 15m",
            "description": rule["annotations"]["description"]
            .replace("{{ $labels.job_namespace }}", "streams")
            .replace("{{ $labels.job_id }}", "a"),
        },
    }
    alerts = [
        {"eval_time": "10m", "alertname": "LockgateJobStuckProgressing", "exp_alerts": []},
        {"eval_time": "20m", "alertname": "LockgateJobStuckProgressing", "exp_alerts": [firing]},
    ]
    tests = tmp_path / "tests.yaml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(rules)],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}],
            }
        )
    )
    run = subprocess.run(
        ["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    recorded = [
        {"record": f"lockgate:panel_{n}_{m}", "expr": query}
        for n, panel in enumerate(panels())
        for m, query in enumerate(panel.queries)
    ]
    _promtool_check(recorded, tmp_path)


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    titles = [p["title"] for p in dashboard()["panels"]]
    for wanted in (
        "Records in per second",
        "Backpressure",
        "Checkpoint duration",
        "Checkpoint size",
        "Time since the last completed checkpoint",
        "Source lag",
        "Restarts",
        "Operator reconciles per second",
        "StreamingJobs by phase",
        "Parallelism",
        "Rescale and upgrade duration",
        "Savepoint duration",
    ):
        assert wanted in titles
    variables = {v["name"] for v in dashboard()["templating"]["list"]}
    assert variables == {"datasource", "namespace", "job"}


def test_queries_read_only_exported_metrics() -> None:
    """Exported, as checked against a running job and operator in test_prometheus."""
    assert metric_names(every_query()) <= RUNTIME_AND_OPERATOR_METRICS
