"""Plugins for every test of the repository, under tests/ and e2e/ alike, and
the one place that says which tests are slow."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.task_leaks", "tests.etcd_fixtures"]

# Tests that run Spark, a `lockgate run` or the driver as a process, or a whole
# scenario on the emulated cluster: tens of seconds each. `pytest -m "not slow"`
# is the quick loop; the suite (scripts/test.sh) runs them all.
SLOW = (
    "tests/runtime/recovery/",
    "tests/runtime/spark/",
    "tests/runtime/cli/test_run.py",
    "tests/runtime/cli/test_run_local.py",
    "tests/runtime/autoscaling/test_autoscaling_on_kafka.py",
    "tests/runtime/autoscaling/test_loop.py",
    "tests/runtime/engine/test_damaged_checkpoints.py",
    "tests/runtime/engine/test_lease_lapse.py",
    "tests/runtime/engine/test_recovery.py",
    "tests/runtime/engine/test_unaligned_review.py",
    "tests/state/test_lockgate_run.py",
    "tests/state/test_spark.py",
    "tests/test_examples.py",
    "tests/test_peer_harness.py",
    "tests/test_task_leaks.py",
    "e2e/test_executor_pods.py",
    "e2e/test_lifecycle.py",
    "e2e/test_recovery.py",
    "e2e/test_rescale.py",
    "e2e/test_suspend.py",
    "tests/helm/test_operator_storage_credentials.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
