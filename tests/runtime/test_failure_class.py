"""Which failures a restart may cure, and which end the job: the classes the job
master restarts by and the driver records (docs/operations.md, Failures and restarts)."""

from __future__ import annotations

import pytest
from lockgate.runtime.api.connectors import UnreadableRecordError
from lockgate.runtime.api.entrypoint import JobBuildError
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.coordination.errors import CoordinatorConflictError, CoordinatorFencedError
from lockgate.runtime.coordination.etcd import EtcdUnavailableError
from lockgate.runtime.engine.job_failure import JobCodeError
from lockgate.runtime.engine.job_master import EarlierRunError, JobGaveUpError, ends_the_job
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError, NonRestoredStateError
from lockgate.runtime.failure_class import TRACEBACK_LIMIT, FailureClass, classify, failure_traceback
from lockgate.runtime.snapshot.metadata import SnapshotNotSignedError
from lockgate.runtime.snapshot.storage import SnapshotCorruptError


def _import_failure() -> JobBuildError:
    try:
        import lockgate_pricing_tables  # type: ignore[import-not-found]  # noqa: F401, PLC0415 - not installed
    except ImportError as error:
        return JobBuildError("jobs.pricing:build", "to import", error)
    raise AssertionError("the module is not installed")


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (_import_failure(), FailureClass.CODE),
        (JobDefinitionError("source 'in' would read nothing"), FailureClass.DEFINITION),
        (UnreadableRecordError("the message at offset 7 is not 'json'"), FailureClass.DEFINITION),
        (EarlierRunError("job ns/j has 2 completed checkpoint(s)"), FailureClass.DEFINITION),
        (CoordinatorConflictError("another coordinator holds ns/j"), FailureClass.DEFINITION),
        (MaxParallelismMismatchError("file:///s", "sums", 128, 64, None), FailureClass.RESTORE),
        (NonRestoredStateError("file:///s", ["sum"], ["sums"]), FailureClass.RESTORE),
        (SnapshotCorruptError("file:///s/_metadata", "truncated"), FailureClass.RESTORE),
        (SnapshotNotSignedError("file:///s/_metadata", "is not signed"), FailureClass.TRUST),
        (
            JobCodeError("ValueError: no price in _price (job.py, line 3)", "Traceback …"),
            FailureClass.TRANSIENT,
        ),
        (CoordinatorFencedError("the lease lapsed"), FailureClass.TRANSIENT),
        (EtcdUnavailableError("no endpoint answered"), FailureClass.TRANSIENT),
        (RuntimeError("an executor was lost"), FailureClass.TRANSIENT),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_each_failure_has_its_class(failure: BaseException, expected: FailureClass) -> None:
    assert classify(failure) is expected
    assert ends_the_job(failure) is expected.permanent


def test_a_strategy_that_gave_up_ends_the_job_with_the_last_failures_class_and_traceback() -> None:
    last = JobCodeError("ValueError: no price", "Traceback …\nValueError: no price")
    gave_up = JobGaveUpError("gave up after 3 restart(s)", last, last.job_traceback)
    assert ends_the_job(gave_up)
    assert classify(gave_up) is FailureClass.TRANSIENT
    assert failure_traceback(gave_up) == last.job_traceback


def test_a_long_traceback_keeps_its_end() -> None:
    long = JobCodeError(
        "RecursionError", "frame\n" * 2000 + "RecursionError: maximum recursion depth exceeded"
    )
    kept = failure_traceback(long)
    assert kept is not None
    assert kept.endswith("RecursionError: maximum recursion depth exceeded")
    assert kept.startswith(f"[{len(long.job_traceback) - TRACEBACK_LIMIT} characters cut]\n")
    assert "ModuleNotFoundError: No module named 'lockgate_pricing_tables'" in (
        failure_traceback(_import_failure()) or ""
    )
