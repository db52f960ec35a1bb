"""A failure in the job's own code on a Spark task, shown to the user as the job's
traceback, once; and a record of the job's input that no restart can read, shown
as the one paragraph the source wrote about it.

On Spark, a task's exception reaches the driver only as text inside Py4J's error,
with the runtime's and Spark's frames and Java's stack around it. A task whose
failure went through the job's code therefore raises it again as one line between
markers that carries the job's part of the traceback (`carried`); the driver finds
that line in Py4J's text and raises `JobCodeError` (`found_in`), whose message is
what the job's code raised, where, and its traceback with only the job's frames.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from lockgate.runtime.api.connectors import UnreadableRecordError
from lockgate.runtime.api.job_traceback import implicating_job_frame, job_traceback

_BEGIN, _END = "<<lockgate-job-failure>>", "<<end-lockgate-job-failure>>"
_CARRIED = re.compile(re.escape(_BEGIN) + r"(.*?)" + re.escape(_END))


class JobCodeError(RuntimeError):
    """The job's code raised `summary` (type, message, where); `job_traceback` holds
    its traceback with the job's frames only."""

    def __init__(self, summary: str, job_traceback: str) -> None:
        super().__init__(f"the job's code raised {summary}\n{job_traceback}")
        self.summary = summary
        self.job_traceback = job_traceback


class CarriedJobFailureError(RuntimeError):
    """What a task raises in place of its job's failure: one line Py4J passes on."""


def job_code_paths(entrypoint: str) -> tuple[str, ...]:
    """Where the job's top-level package (or module) lies, once imported: its code
    counts as the job's even when it is installed among the site's packages."""
    module = sys.modules.get(entrypoint.partition(":")[0].split(".")[0])
    if (origin := getattr(module, "__file__", None)) is None:
        return ()
    path = Path(origin)
    return (f"{path.parent}/",) if path.name == "__init__.py" else (str(path),)


def carried(error: BaseException, job_paths: tuple[str, ...] = ()) -> CarriedJobFailureError | None:
    """`error` as a task on Spark raises it, if the job's code or its input is to blame
    for it (input: a record no restart can read, whose message says all there is)."""
    if isinstance(error, UnreadableRecordError):
        return CarriedJobFailureError(f"{_BEGIN}{json.dumps({'unreadable': str(error)})}{_END}")
    if (frame := implicating_job_frame(error, job_paths)) is None:
        return None
    where = f"in {frame.name} ({Path(frame.filename).name}, line {frame.lineno})"
    summary = f"{type(error).__name__}: {error} {where}"
    payload = json.dumps({"summary": summary, "traceback": job_traceback(error)})
    return CarriedJobFailureError(f"{_BEGIN}{payload}{_END}")


def found_in(text: str) -> JobCodeError | UnreadableRecordError | None:
    """The job's failure a task carried, from the text of the error that reached the driver."""
    if (match := _CARRIED.search(text)) is None:
        return None
    try:
        payload = json.loads(match[1])
        if "unreadable" in payload:
            return UnreadableRecordError(str(payload["unreadable"]))
        return JobCodeError(str(payload["summary"]), str(payload["traceback"]))
    except (ValueError, KeyError, TypeError):
        return None  # not ours after all: the text is shown as it is


def failure_traceback_text(error: BaseException, entrypoint: str) -> str | None:
    """The job's part of the traceback of a launch's failure: the one a task on Spark
    carried, else the job's frames of an error raised through the job's code (tasks
    in this process); None when the job's code is not to blame."""
    carried_text = getattr(error, "job_traceback", None)
    if isinstance(carried_text, str):
        return carried_text
    if implicating_job_frame(error, job_code_paths(entrypoint)) is None:
        return None
    return job_traceback(error)
