"""Unit tests of a job's dataflow, in this process, with no Spark and no etcd.

    from lockgate.testing import run_job

    def test_counts_words():
        result = run_job(build, parallelism=2, sources={"lines": ["a b", "b"]})
        assert sorted(result.outputs["out"]) == [("a", 1), ("b", 1), ("b", 2)]

The job runs as on a cluster — its tasks, key-group exchange, state backend,
barrier checkpoints and two-phase-committed sinks are the real ones — with the
control plane and checkpoint storage in memory. See "Testing your job" in
docs/writing-jobs.md.
"""

from lockgate.runtime.clock import ManualClock
from lockgate.testing.marks import Watermark
from lockgate.testing.runner import JobResult, run_job
from lockgate.testing.settings import Savepoint

__all__ = ["JobResult", "ManualClock", "Savepoint", "Watermark", "run_job"]
