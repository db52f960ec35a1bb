"""What a run checks before etcd or Spark start: the savepoint it is told to restore
fits the job (each state claimed by a vertex, the same max parallelism) and exists."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime.driver.options import add_job_options, settings_from
from lockgate.runtime.driver.preflight import preflight
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError, NonRestoredStateError
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError
from lockgate.runtime.state.operator_state import OperatorStateStore

from tests.runtime.cli.refusals import ARGS, WORD_COUNT, manifest, settings
from tests.runtime.cli.test_run import _lockgate
from tests.vertex_snapshots import LocalSubtask, snapshot_vertex


def _savepoint(tmp_path: Path, vertex: str) -> str:
    """A savepoint of one subtask of `vertex` holding a source's offsets (max parallelism 1)."""
    storage = CheckpointStorage(f"file://{tmp_path}/savepoints")
    operator = OperatorStateStore()
    operator.union_list_state("offsets").update([["part-0", 120]])
    directory = f"{storage.root}/savepoint-1"
    snapshot_vertex(storage, directory, ("words", 1, "savepoint"), vertex, [LocalSubtask(None, operator)])
    return f"file://{directory}"


def _flags(savepoint: str, *more: str) -> list[str]:
    # Made here, not by a run of the job: unsigned, so the test vouches for it.
    flags = [
        "-p",
        "1",
        "--max-parallelism",
        "1",
        "--from-savepoint",
        savepoint,
        "--import-unsigned-savepoint",
    ]
    return [WORD_COUNT, *ARGS, *flags, *more]


def test_a_savepoint_of_a_renamed_source_is_refused_naming_its_state(tmp_path: Path) -> None:
    chosen = settings(tmp_path, *_flags(_savepoint(tmp_path, "numbers")))
    with pytest.raises(
        NonRestoredStateError, match=r"no vertex of this job claims: 'numbers' \(operator state\)"
    ):
        preflight(chosen, None)


def test_allowing_non_restored_state_lets_the_run_go_on(tmp_path: Path) -> None:
    chosen = settings(tmp_path, *_flags(_savepoint(tmp_path, "numbers"), "--allow-non-restored-state"))
    assert preflight(chosen, None).sources[0].name == "lines"


def test_a_savepoint_whose_state_the_job_claims_passes(tmp_path: Path) -> None:
    preflight(settings(tmp_path, *_flags(_savepoint(tmp_path, "lines"))), None)


def test_a_savepoint_of_another_max_parallelism_is_refused(tmp_path: Path) -> None:
    savepoint = _savepoint(tmp_path, "lines")
    chosen = settings(
        tmp_path, WORD_COUNT, *ARGS, "-p", "1", "--from-savepoint", savepoint, "--import-unsigned-savepoint"
    )
    with pytest.raises(MaxParallelismMismatchError, match="Run with --max-parallelism 1"):
        preflight(chosen, None)


@pytest.mark.parametrize("parallelism", ["2", "5000"])
def test_a_parallelism_above_the_savepoints_max_parallelism_is_refused_naming_both(
    tmp_path: Path, parallelism: str
) -> None:
    """The state fixes the job's max parallelism: once the refusal named only the run's
    max parallelism (from -p), and setting it as told was then refused for -p."""
    savepoint = _savepoint(tmp_path, "lines")
    chosen = settings(
        tmp_path,
        WORD_COUNT,
        *ARGS,
        "-p",
        parallelism,
        "--from-savepoint",
        savepoint,
        "--import-unsigned-savepoint",
    )
    with pytest.raises(
        MaxParallelismMismatchError,
        match=rf"parallelism {parallelism} exceeds max parallelism 1 of the state in {savepoint} .*at most 1",
    ):
        preflight(chosen, None)


def test_a_savepoint_that_is_not_there_is_named(tmp_path: Path) -> None:
    chosen = settings(tmp_path, *_flags(f"file://{tmp_path}/savepoints/savepoint-9"))
    with pytest.raises(SnapshotCorruptError, match=r"savepoint-9/_metadata: missing"):
        preflight(chosen, None)


def test_lockgate_run_refuses_it_with_exit_2_before_starting_etcd(tmp_path: Path) -> None:
    result = _lockgate(tmp_path, "run", *_flags(_savepoint(tmp_path, "numbers")))
    assert result.returncode == 2, result.stderr
    assert "lockgate run: file://" in result.stderr
    assert "'numbers' (operator state)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".lockgate" / "etcd").exists()


@pytest.mark.parametrize("field", ["job.importUnsignedSavepoint", "initialSavepointPath"])
def test_a_manifests_import_is_restored_by_lockgate_run_and_never_by_a_launched_driver(
    tmp_path: Path, field: str
) -> None:
    """`spec.job.importUnsignedSavepoint` or `spec.initialSavepointPath` in a local
    run acts as `--from-savepoint PATH --import-unsigned-savepoint`. A driver the
    operator launched reads the same manifest on every launch: it restores only what
    the operator's flags name, or a relaunch would rewind the job to the imported
    savepoint."""
    savepoint = _savepoint(tmp_path, "lines")
    spec: dict[str, Any] = {"job": {"entrypoint": WORD_COUNT}}
    if field == "initialSavepointPath":
        spec["initialSavepointPath"] = savepoint
    else:
        spec["job"]["importUnsignedSavepoint"] = savepoint
    job = manifest(tmp_path, spec)
    local = settings(tmp_path, job, *ARGS, "-p", "1", "--max-parallelism", "1")
    assert (local.from_savepoint, local.trust.savepoint) == (savepoint, savepoint)
    preflight(local, None)  # unsigned, and restored: vouched for
    parser = argparse.ArgumentParser(prog="lockgate driver")
    add_job_options(parser)
    arguments = parser.parse_args([job, *ARGS, "-p", "1", "--max-parallelism", "1"])
    launched = settings_from(arguments, tmp_path, fresh_by_default=False)
    assert (launched.from_savepoint, launched.trust.savepoint) == (None, None)
