"""What can go wrong in checkpoint coordination, by what the caller should do."""

from __future__ import annotations


class CoordinatorConflictError(RuntimeError):
    """Another live coordinator holds the job: stop it, or wait for its lease."""


class CoordinatorFencedError(RuntimeError):
    """This coordinator lost its lease or was replaced: it must stop at once."""


class JobFailedError(RuntimeError):
    """The job cannot go on: checkpoints failed more often in a row than tolerated,
    or one of the coordinator's own loops died."""


class CheckpointAbortedError(RuntimeError):
    """One checkpoint or savepoint was aborted (timeout, decline, fencing)."""

    def __init__(self, checkpoint_id: int, reason: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} aborted: {reason}")
        self.checkpoint_id = checkpoint_id
        self.reason = reason
