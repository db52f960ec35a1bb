"""Which failures are the job's, and how a task carries one to the driver through
the text Py4J passes on."""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lockgate.runtime.api import job_traceback
from lockgate.runtime.api.connectors import UnreadableRecordError
from lockgate.runtime.api.validation import milliseconds
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.channels import LocalChannel
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.job_failure import carried, found_in, job_code_paths
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.failure_class import classify
from lockgate.runtime.spark.stage import recorded_failure


def _raised(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as error:  # noqa: BLE001 - the test looks at it
        return error
    raise AssertionError("nothing raised")


def _the_jobs_code() -> None:
    json.loads("{not json")  # a library called by the job's code raises


RAISING_LINE = inspect.getsourcelines(_the_jobs_code)[1] + 1


def _emits(downstream: Callable[[], None]) -> None:
    downstream()  # the job's function, while the runtime takes what it emitted


def test_an_error_the_runtime_raises_on_its_own_under_the_jobs_frame_is_not_the_jobs() -> None:
    """A channel torn down while the job's function emitted: the runtime's, not the job's."""
    cancelled = threading.Event()
    cancelled.set()
    full = LocalChannel(1, cancelled=cancelled)
    full.send([1])
    assert carried(_raised(lambda: _emits(lambda: full.send([2])))) is None


def test_the_runtime_refusing_what_the_jobs_code_asked_is_the_jobs() -> None:
    asked = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    refused = _raised(lambda: _emits(lambda: milliseconds(5, "the window size")))
    job_failure = carried(refused)
    assert job_failure is not None
    found = found_in(str(job_failure))
    assert found is not None
    assert found.summary == (
        "JobDefinitionError: the window size takes a datetime.timedelta, got int 5 "
        f"in <lambda> (test_job_failure.py, line {asked})"
    )


def test_a_record_of_the_input_no_restart_can_read_reaches_the_driver_as_its_own_message() -> None:
    """Raised by a source's reader (no job frame on the stack): carried all the same, and
    found again as the same error, which ends the run without a restart (job_master)."""
    unreadable = UnreadableRecordError(
        "KafkaSource: the message at topic 't' partition 1 offset 7 is not 'json'"
    )
    job_failure = carried(_raised(lambda: _emits(lambda: _refuse(unreadable))))
    assert job_failure is not None
    found = found_in(f"py4j.protocol.Py4JJavaError: An error occurred\n{job_failure}\n\tat org.apache.spark")
    assert isinstance(found, UnreadableRecordError)
    assert str(found) == str(unreadable)
    assert classify(found).permanent


def _refuse(error: BaseException) -> None:
    raise error


@pytest.mark.parametrize(
    "text", ["no marker at all", "<<lockgate-job-failure>>not json<<end-lockgate-job-failure>>"]
)
def test_text_without_a_carried_failure_is_left_as_it_is(text: str) -> None:
    assert found_in(text) is None


def test_a_job_installed_among_the_sites_packages_is_still_blamed_as_the_job(monkeypatch) -> None:
    here = str(Path(__file__).parent) + "/"
    # This file as if pip had installed it.
    monkeypatch.setattr(job_traceback, "_LIBRARIES", (here, *job_traceback._LIBRARIES))
    error = _raised(_the_jobs_code)
    assert carried(error) is None, "a library's error with no job's frame above it is not the job's"
    assert carried(error, job_code_paths("tests.runtime.engine.test_job_failure:build")) is not None


def test_the_runtime_installed_among_the_sites_packages_is_still_the_runtime(monkeypatch) -> None:
    """As in the image and a pip install: the runtime's files lie under site-packages,
    and an error it raises on its own under the job's frame is still not the job's."""
    runtime = str(Path(job_traceback.__file__).parents[1]) + "/"  # as the frames name it
    monkeypatch.setattr(job_traceback, "_LIBRARIES", (runtime, *job_traceback._LIBRARIES))
    cancelled = threading.Event()
    cancelled.set()
    full = LocalChannel(1, cancelled=cancelled)
    full.send([1])
    assert carried(_raised(lambda: _emits(lambda: full.send([2])))) is None


def test_a_tasks_failure_recorded_under_its_launch_is_the_one_the_driver_names(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    """Spark names the stage's first failed task: often a peer whose exchange broke
    when the task that read the unreadable record died (seen in CI: a restart, then
    the same record again). That task records its failure under its launch first,
    and the driver reads it there when Py4J's text carries none."""
    config = EtcdConfig.from_url(etcd_server.endpoint)
    keys = JobKeys("test", "recorded-failure")
    spec = JobSpec("m:f", keys, 2, StateConfig("heap", tmp_path, 32), config, secret=b"s" * 32, launch=7)
    assert recorded_failure(spec) == "", "nothing recorded: Spark's own error stands"
    control = CheckpointControl(config, keys, 1, 7)
    try:
        message = "KafkaSource: the message at topic 't' partition 1 offset 750 is not 'json'"
        job_failure = carried(UnreadableRecordError(message))
        assert job_failure is not None
        control.record_failure(str(job_failure))
    finally:
        control.close()
    named = found_in(recorded_failure(spec))
    assert isinstance(named, UnreadableRecordError)
    assert str(named) == message
    assert classify(named).permanent, "no restart can read it"
    other_launch = dataclasses.replace(spec, launch=8)
    assert recorded_failure(other_launch) == "", "a failure is its launch's alone"
