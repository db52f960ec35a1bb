"""What can go wrong in checkpoint coordination, by what the caller should do."""

from __future__ import annotations

from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.failure_class import FailureClass


class CoordinatorConflictError(RuntimeError):
    """Another live coordinator holds the job: stop it, or wait for it to stop beating."""

    failure_class = FailureClass.DEFINITION


class CoordinatorFencedError(RuntimeError):
    """This coordinator was replaced or lost etcd for a TTL: it must stop at once."""


class JobFailedError(RuntimeError):
    """The job cannot go on: checkpoints failed more often in a row than tolerated,
    or one of the coordinator's own loops died."""


class CheckpointAbortedError(RuntimeError):
    """One checkpoint or savepoint was aborted (timeout, decline, fencing)."""

    def __init__(self, checkpoint_id: int, reason: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} aborted: {reason}")
        self.checkpoint_id = checkpoint_id
        self.reason = reason


class NoUsableCheckpointError(RuntimeError):
    """The job has completed checkpoints and none of them can be restored. Starting
    from empty state instead would read every source again from its beginning and
    lose the job's state, so the user must choose: an explicit savepoint, or `--fresh`."""

    failure_class = FailureClass.RESTORE

    def __init__(self, keys: JobKeys, failures: list[str]) -> None:
        listed = "".join(f"\n  {failure}" for failure in failures)
        super().__init__(
            f"job {keys.namespace}/{keys.job}: none of its completed checkpoints can be restored:{listed}\n"
            "Starting from empty state would read every source again from its beginning and lose "
            "the job's state, so the job does not start. Restore a savepoint or checkpoint you trust "
            "with --from-savepoint PATH, or start over from empty state with --fresh (deletes the "
            "job's checkpoints)."
        )
        self.failures = failures


ACCEPT_DUPLICATES_OPTION = "--accept-duplicate-output"
ACCEPT_DUPLICATES_FIELD = "spec.job.acceptDuplicateOutput"


class RestoreBehindCommittedOutputError(RuntimeError):
    """The newest snapshot that can be restored is older than one that completed: the
    sinks committed the output of the epochs in between (a sink commits an epoch only
    once its checkpoint completed), and restoring would write it again. Refused unless
    the user accepts the duplicates (`--accept-duplicate-output`)."""

    failure_class = FailureClass.RESTORE

    def __init__(self, keys: JobKeys, restore: str, newest: int, failures: list[str]) -> None:
        listed = "".join(f"\n  {failure}" for failure in failures)
        super().__init__(
            f"job {keys.namespace}/{keys.job}: the newest snapshot that can be restored is {restore}, but "
            f"checkpoint {newest} completed after it, and the sinks committed the job's output up to "
            f"its epoch {newest}. What is wrong with the newer ones:{listed}\n"
            "Restoring it would write the output committed after it again (a sink cannot take back "
            "what it committed), so the job does not start. Restore a copy of a newer snapshot you "
            f"trust with --from-savepoint PATH, or accept the duplicates with {ACCEPT_DUPLICATES_OPTION} "
            f"({ACCEPT_DUPLICATES_FIELD}: true in a StreamingJob)."
        )
        self.newest = newest
        self.failures = failures
