"""What kind of failure ended a launch — whether a restart may cure it, and if
not, what the user has to change — as Flink's ThrowableClassifier tells a
recoverable error from one that is not.

An error declares its class (`failure_class`, on its type or, for one that
carries another's, on itself); any other error is transient. The job master
restarts a transient failure by the job's restart strategy and ends the run at
once on a permanent one; the driver records the class with the job's outcome,
and the operator relaunches a driver that was lost, never one that ended the
job with a failure it recorded.

A module of its own, under every layer: the errors that declare a class live
from the job API down to the snapshot files.
"""

from __future__ import annotations

import enum

# A StreamingJob's status keeps the job's traceback, an etcd value the outcome:
# the end of a long one (where it was raised) is what is kept.
TRACEBACK_LIMIT = 4000


class FailureClass(enum.StrEnum):
    TRANSIENT = "transient"
    """A restart may cure it: a task or executor lost, etcd out of reach, the job's
    code raising on what it read (the restart strategy decides how often)."""
    CODE = "code"
    """The job's code does not import, or raises while it builds the job."""
    DEFINITION = "definition"
    """The job, its options or its spec are wrong: its graph, its connectors, an
    option, another run holding the job id, a record its source cannot read."""
    RESTORE = "restore"
    """The state it restores does not fit the job (key groups, operators), is
    damaged, or is missing."""
    TRUST = "trust"
    """The state it restores was not signed by the job's key."""

    @property
    def permanent(self) -> bool:
        """Whether the same launch would fail the same way again."""
        return self is not FailureClass.TRANSIENT


def classify(error: BaseException) -> FailureClass:
    """The class `error` declares; transient when it declares none."""
    declared = getattr(error, "failure_class", None)
    return declared if isinstance(declared, FailureClass) else FailureClass.TRANSIENT


def failure_traceback(error: BaseException) -> str | None:
    """The job's part of the traceback an error carries (`job_traceback`, set by the
    errors raised in or for the job's code), at most TRACEBACK_LIMIT characters;
    None when the job's code is not to blame."""
    text = getattr(error, "job_traceback", None)
    if not isinstance(text, str) or not text:
        return None
    return bounded(text)


def bounded(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text`, or its last `limit` characters after a line saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"[{len(text) - limit} characters cut]\n{text[-limit:]}"
