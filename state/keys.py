"""The job's snapshot key, where `lockgate run` keeps it: the key that signs a
job's snapshots also vouches for what `lockgate.state` reads and writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lockgate.runtime.cli.etcd_options import WORK_DIR
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey, key_for_local_job, read_key


def local_key_path(job_id: str, namespace: str = "default", work_dir: Path = WORK_DIR) -> Path:
    """Where a job run on this machine keeps its key (as `lockgate run` does)."""
    return work_dir / "keys" / namespace / f"{job_id}.key"


def job_key(
    job_id: str, namespace: str = "default", work_dir: Path = WORK_DIR, *, create: bool = False
) -> SnapshotKey:
    """The key of job `job_id` run in `work_dir` (default: `.lockgate` here). With
    `create`, a job that has none yet gets one (a savepoint bootstrapped for a job
    that never ran), written before anything is signed with it."""
    path = local_key_path(job_id, namespace, work_dir)
    if create:
        key = key_for_local_job(path.resolve())
        key.persist()
        return dataclasses.replace(key, unsaved=None)  # written: nothing writes it again
    return read_key(path)
