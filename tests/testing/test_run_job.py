"""`lockgate.testing.run_job`: a job's dataflow run in-process, as a job's own unit
tests run it — outputs exactly once, a stop with a savepoint and a resume at
another parallelism, time under the test's control, errors that name the culprit."""

from __future__ import annotations

import concurrent.futures
import json
import math
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest
from lockgate.runtime import (
    CollectSink,
    GeneratorSource,
    StreamEnvironment,
)
from lockgate.runtime.api.job_args import JobArgumentError
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.engine.restore_check import MaxParallelismMismatchError, NonRestoredStateError
from lockgate.testing import ManualClock, Savepoint, run_job

from tests.jobs.functions import RunningSum
from tests.testing import jobs

KEYS = 5
NUMBERS = [{"n": n, "key": n % KEYS} for n in range(200)]


def _assert_running_sums(outputs: list[dict[str, Any]], numbers: list[dict[str, Any]]) -> None:
    """Every record once, and each key's sums rising in output order (one subtask's commits are in order)."""
    assert sorted(r["n"] for r in outputs) == sorted(r["n"] for r in numbers)
    for key in range(KEYS):
        sums = [r["sum"] for r in outputs if r["key"] == key]
        assert sums == sorted(sums)
        assert sums[-1] == sum(r["n"] for r in numbers if r["key"] == key)


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_what_each_sink_committed_is_returned_once_in_order(parallelism: int, backend: Any) -> None:
    result = run_job(
        jobs.running_sum, parallelism=parallelism, sources={"numbers": NUMBERS}, state_backend=backend
    )

    _assert_running_sums(result.outputs["out"], NUMBERS)
    assert result.savepoint is None


def test_a_source_not_replaced_is_read_to_its_end() -> None:
    result = run_job(jobs.two_sources, parallelism=2)

    assert sorted(result.outputs["even-out"]) == [0, 2, 4, 6, 8, 10]
    assert sorted(result.outputs["odd-out"]) == [10, 30, 50, 70]


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_stop_with_a_savepoint_resumes_at_another_parallelism_losing_and_repeating_nothing(
    before: int, after: int, backend: Any
) -> None:
    first = run_job(
        jobs.running_sum,
        parallelism=before,
        sources={"numbers": NUMBERS},
        stop_after_records=70,
        state_backend=backend,
    )
    rest = run_job(
        jobs.running_sum,
        parallelism=after,
        sources={"numbers": NUMBERS},
        restore=first.savepoint,
        state_backend=backend,
    )

    assert first.records_read == 70
    assert isinstance(first.savepoint, Savepoint)
    assert first.savepoint.records_read == 70
    assert "_metadata" in first.savepoint.files
    assert sorted(r["n"] for r in first.outputs["out"]) == list(range(70)), "the first 70, all committed"
    _assert_running_sums(first.outputs["out"] + rest.outputs["out"], NUMBERS)


def test_a_stop_after_more_records_than_there_are_stops_once_all_are_read() -> None:
    first = run_job(
        jobs.running_sum, parallelism=2, sources={"numbers": NUMBERS[:30]}, stop_after_records=1000
    )
    rest = run_job(jobs.running_sum, sources={"numbers": NUMBERS[:30]}, restore=first.savepoint)

    assert first.records_read == 30
    _assert_running_sums(first.outputs["out"], NUMBERS[:30])
    assert rest.outputs["out"] == []


def test_a_savepoint_resumes_twice_from_the_same_place() -> None:
    """A savepoint is a value: restoring it does not use it up."""
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=100)
    again = [
        run_job(jobs.running_sum, parallelism=p, sources={"numbers": NUMBERS}, restore=first.savepoint)
        for p in (1, 2)
    ]

    for rest in again:
        _assert_running_sums(first.outputs["out"] + rest.outputs["out"], NUMBERS)


@pytest.mark.parametrize("build", ["tests.testing.jobs:running_sum", f"{jobs.__file__}:running_sum"])
def test_the_job_may_be_named_as_module_function_or_file_function(build: str) -> None:
    for _ in range(2):  # the file's module, imported by the first run, is the same file the second time
        result = run_job(build, parallelism=2, sources={"numbers": NUMBERS}, args={"count": "3"})
        _assert_running_sums(result.outputs["out"], NUMBERS)


def test_a_savepoint_restored_by_two_runs_at_once_repeats_nothing_in_either() -> None:
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=50)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        rests = list(
            pool.map(
                lambda p: run_job(
                    jobs.running_sum, parallelism=p, sources={"numbers": NUMBERS}, restore=first.savepoint
                ),
                (1, 2),
            )
        )
    for rest in rests:
        _assert_running_sums(first.outputs["out"] + rest.outputs["out"], NUMBERS)


def test_args_reach_the_job() -> None:
    result = run_job(jobs.running_sum, args={"count": "7"})

    assert sorted(r["n"] for r in result.outputs["out"]) == list(range(7))


def test_a_manual_clock_drives_state_ttl_and_processing_time_timers() -> None:
    clock = ManualClock(0)
    records = [{"key": "a"}, {"key": "a"}]
    first = run_job(jobs.expiring, sources={"in": records}, clock=clock, stop_after_records=1)
    clock.advance(1_000)  # past the state's 1 s TTL and the timer's 500 ms
    rest = run_job(jobs.expiring, sources={"in": records}, clock=clock, restore=first.savepoint)

    assert first.outputs["out"] == [("seen", "a", 1, 0)], "no timer is due while the clock stands still"
    assert sorted(rest.outputs["out"]) == [("seen", "a", 1, 1_000), ("timer", "a", 500)]


def test_a_failure_in_the_jobs_code_is_raised_as_its_own_exception() -> None:
    with pytest.raises(ZeroDivisionError):
        run_job(jobs.failing, parallelism=2, sources={"in": [{"n": 1}, {"n": 0}]})


async def test_it_runs_from_an_async_test_too() -> None:
    result = run_job(jobs.running_sum, sources={"numbers": NUMBERS[:10]})

    _assert_running_sums(result.outputs["out"], NUMBERS[:10])


def test_a_run_that_does_not_end_in_time_says_so_and_leaves_nothing_running() -> None:
    def endless(env: StreamEnvironment) -> None:
        env.source(GeneratorSource(None), name="forever").sink(CollectSink("never-read"), name="out")

    threads = set(threading.enumerate())
    with pytest.raises(
        TimeoutError,
        match=r"did not end within 0.5 s; a source not given in sources= may not end \(forever\)",
    ):
        run_job(endless, timeout_s=0.5)
    assert set(threading.enumerate()) <= threads


def test_a_run_leaves_nothing_in_memory_behind() -> None:
    memory = fsspec.filesystem("memory")
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=10)
    run_job(jobs.running_sum, sources={"numbers": NUMBERS}, restore=first.savepoint)

    assert not memory.exists("/lockgate-testing") or memory.ls("/lockgate-testing") == []


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"parallelism": 0}, ValueError, "parallelism must be a positive int, got 0"),
        ({"parallelism": "2"}, ValueError, "parallelism must be a positive int, got '2'"),
        ({"parallelism": True}, ValueError, "parallelism must be a positive int, got True"),
        ({"parallelism": 200}, ValueError, "parallelism 200 exceeds max_parallelism 128"),
        ({"stop_after_records": 0}, ValueError, "stop_after_records must be a positive int, got 0"),
        ({"args": {"count": 3}}, TypeError, r"args\['count'\] = 3: a job's arguments are strings"),
        ({"sources": {"numbers": "abc"}}, TypeError, r"sources\['numbers'\] is a str; give a list"),
        (
            {"sources": {"numbres": []}},
            JobDefinitionError,
            "sources= names numbres, but the job's sources are numbers",
        ),
        (
            {"sources": {"numbers": [threading.Lock()]}},
            TypeError,
            r"sources\['numbers'\]\[0\] .* cannot be pickled",
        ),
        ({"restore": "memory://x"}, TypeError, "restore takes a result's .savepoint, got str"),
        ({"timeout_s": 0}, ValueError, "timeout_s must be a positive, finite number of seconds, got 0"),
        ({"timeout_s": "5"}, ValueError, "timeout_s must be a positive, finite number of seconds, got '5'"),
        (
            {"timeout_s": math.inf},
            ValueError,
            "timeout_s must be a positive, finite number of seconds, got inf",
        ),
        (
            {"state_backend": "RocksDB"},
            ValueError,
            "state_backend must be 'heap' or 'rocksdb', got 'RocksDB'",
        ),
        ({"clock": time.time}, TypeError, "clock takes a clock with now_ms"),
        ({"sources": {"numbers": 5}}, TypeError, r"sources\['numbers'\] is a int; give a list"),
        (
            {"sources": [("numbers", [])]},
            TypeError,
            "sources takes a dict of source vertex name to records, got list",
        ),
        ({"args": [("count", "3")]}, TypeError, "args takes a dict of strings, got list"),
        ({"allow_non_restored_state": "yes"}, TypeError, "allow_non_restored_state takes True or False"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(
    given: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        run_job(jobs.running_sum, **given)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (42, "build must be a function or 'module:function', got 42"),
        ("tests.testing.jobs:nothing", "has no 'nothing'"),
        ("tests/testing/jobs.py", "name the function that builds the job"),
    ],
)
def test_a_build_that_is_not_a_job_is_refused_naming_it(build: Any, message: str, tmp_path: Path) -> None:
    with pytest.raises((TypeError, JobDefinitionError), match=message):
        run_job(build)


def test_a_stop_iteration_from_the_jobs_code_fails_the_run_instead_of_hanging_it() -> None:
    def first_big(record: Any) -> Any:
        return next(item for item in record["items"] if item > 100)

    def build(env: StreamEnvironment) -> None:
        env.source(GeneratorSource(0), name="in").map(first_big).sink(CollectSink("x"), name="out")

    with pytest.raises(RuntimeError, match="a task raised StopIteration") as raised:
        run_job(build, sources={"in": [{"items": [1, 2]}]}, timeout_s=30)
    assert isinstance(raised.value.__cause__, StopIteration)


RELEASE = threading.Event()


def _stuck(record: Any) -> Any:
    RELEASE.wait()  # the job's code that never returns (until the test lets it)
    return record


def test_a_job_stuck_in_its_own_code_times_out_and_the_run_returns() -> None:
    def build(env: StreamEnvironment) -> None:
        env.source(GeneratorSource(0), name="in").map(_stuck).sink(CollectSink("x"), name="out")

    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"did not end within 0\.5 s"):
            run_job(build, sources={"in": [1]}, timeout_s=0.5)
        assert time.monotonic() - started < 20, "the stuck task's thread was left behind, not waited for"
    finally:
        RELEASE.set()


class Accumulate:
    """Emits one list object, grown by every record: the sink must take each record
    as it was when written (a FileSink encodes it then), not as it is at the commit."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, record: Any) -> Any:
        self.seen.append(record)
        return self.seen


def test_a_record_is_collected_as_it_was_when_written_not_as_it_is_at_the_commit() -> None:
    def build(env: StreamEnvironment) -> None:
        env.source(GeneratorSource(0), name="in").map(Accumulate()).sink(CollectSink("x"), name="out")

    outputs = run_job(build, sources={"in": list(range(600))}).outputs["out"]  # batches of 512 at most
    assert len(outputs[0]) < len(outputs[-1]) == 600


class Tally:
    """A callable object with its own counter, as a map function."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, record: Any) -> Any:
        self.seen += 1
        return (id(self), self.seen)


def test_each_subtask_has_its_own_instance_of_the_jobs_function() -> None:
    def build(env: StreamEnvironment) -> None:
        env.source(GeneratorSource(40, partitions=2), name="in").map(Tally()).sink(
            CollectSink("x"), name="out"
        )

    result = run_job(build, parallelism=2)
    by_instance: dict[int, list[int]] = {}
    for instance, seen in result.outputs["out"]:
        by_instance.setdefault(instance, []).append(seen)
    assert len(by_instance) == 2, "one instance per subtask"
    assert sorted(len(s) for s in by_instance.values()) == [20, 20]
    for counts in by_instance.values():
        assert counts == list(range(1, 21)), "each counted only its own subtask's records"


def test_a_savepoint_pickled_and_restored_in_another_process_repeats_nothing(tmp_path: Path) -> None:
    """A savepoint kept in a file (a test of whether an old savepoint still restores)
    is restored by a process that never saw the run that took it."""
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=10)
    kept = tmp_path / "savepoint.pickle"
    kept.write_bytes(pickle.dumps(first.savepoint))
    restoring = (
        "import json, pickle, sys; from lockgate.testing import run_job; from tests.testing import jobs; "
        "from tests.testing.test_run_job import NUMBERS; "
        f"rest = run_job(jobs.running_sum, sources={{'numbers': NUMBERS}}, restore=pickle.load(open({str(kept)!r}, 'rb'))); "
        "print(json.dumps(rest.outputs['out']))"
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", restoring],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    _assert_running_sums(first.outputs["out"] + json.loads(elsewhere.stdout.splitlines()[-1]), NUMBERS)


def test_a_run_forgets_the_transactions_it_committed_when_it_ends() -> None:
    names_before = len(CollectSink._ids_by_name)
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=10)
    run_job(jobs.running_sum, sources={"numbers": NUMBERS}, restore=first.savepoint)
    assert len(CollectSink._ids_by_name) == names_before, "no memory grows with every run"


def test_a_stop_leaves_no_thread_behind() -> None:
    threads = set(threading.enumerate())
    run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=10, timeout_s=300)
    assert set(threading.enumerate()) <= threads, "the savepoint request's lease ends with the run"


def test_an_exception_of_the_build_is_raised_as_itself() -> None:
    def wants_an_argument(env: StreamEnvironment) -> None:
        env.args["output"]

    def raises(env: StreamEnvironment) -> None:
        raise ValueError("the job's own complaint")

    def raises_from(env: StreamEnvironment) -> None:
        try:
            {}["limit"]
        except KeyError as missing:
            raise ValueError("no limit") from missing

    with pytest.raises(
        KeyError, match=r"job argument 'output' is missing: give it in run_job\(args=\{'output': ...\}\)"
    ):
        run_job(wants_an_argument)
    with pytest.raises(ValueError, match="the job's own complaint") as raised:
        run_job(raises)
    assert "built its dataflow" in raised.value.__notes__[0]
    with pytest.raises(ValueError, match="no limit") as caused:
        run_job(raises_from)
    assert isinstance(caused.value.__cause__, KeyError), "the job's own cause is kept"


def test_an_argument_of_the_wrong_kind_is_named_in_run_jobs_words() -> None:
    def typed(env: StreamEnvironment) -> None:
        env.args.int("count")

    with pytest.raises(JobArgumentError) as refused:
        run_job(typed, args={"count": "abc"})
    assert str(refused.value).startswith(
        "job argument count='abc' is not an integer: give it with run_job(args={'count': ...}) (asked for in "
    )


def _renamed(env: StreamEnvironment) -> None:
    (
        env.source(GeneratorSource(0), name="numbers")
        .key_by(lambda record: record["key"])
        .process(RunningSum(), name="total")
        .sink(CollectSink("x"), name="out")
    )


def test_a_restore_the_job_does_not_fit_is_refused_in_run_jobs_words() -> None:
    first = run_job(jobs.running_sum, sources={"numbers": NUMBERS}, stop_after_records=10)

    with pytest.raises(NonRestoredStateError) as refused:
        run_job(_renamed, sources={"numbers": NUMBERS}, restore=first.savepoint)
    assert str(refused.value).startswith(
        "the savepoint given as restore= holds state no vertex of this job claims: 'sum' (keyed state)"
    )
    assert "pass allow_non_restored_state=True to drop the unclaimed state" in str(refused.value)
    dropped = run_job(
        _renamed, sources={"numbers": NUMBERS}, restore=first.savepoint, allow_non_restored_state=True
    )
    assert len(dropped.outputs["out"]) == len(NUMBERS) - 10

    with pytest.raises(MaxParallelismMismatchError, match="Run with max_parallelism=128"):
        run_job(jobs.running_sum, sources={"numbers": NUMBERS}, restore=first.savepoint, max_parallelism=64)


def baue_dätenfluss(env: StreamEnvironment) -> None:  # noqa: PLC2401 - a name a job id cannot take
    jobs.running_sum(env)


def test_a_build_function_of_any_name_runs() -> None:
    assert len(run_job(baue_dätenfluss, sources={"numbers": NUMBERS}).outputs["out"]) == len(NUMBERS)
