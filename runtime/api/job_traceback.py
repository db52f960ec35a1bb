"""The job's part of a traceback: what a user needs to fix their job, without the
runtime's frames (or the import machinery's) that called into it."""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path

# The runtime's own files (this file is in runtime/api/), by the path it was
# imported from and by the real one (an editable install links them), and the
# import machinery's.
_FILES = (Path(__file__), Path(importlib.__file__ or "importlib"))
_NOT_THE_JOBS = (
    "<frozen importlib",
    f"{_FILES[0].parents[1]}/",
    f"{_FILES[0].resolve().parents[1]}/",
    f"{_FILES[1].parent}/",
    f"{_FILES[1].resolve().parent}/",
)


def _the_jobs(frame: traceback.FrameSummary) -> bool:
    return not frame.filename.startswith(_NOT_THE_JOBS)


def _keep_the_jobs(summary: traceback.TracebackException | None, seen: set[int]) -> None:
    while summary is not None and id(summary) not in seen:
        seen.add(id(summary))
        summary.stack = traceback.StackSummary.from_list([f for f in summary.stack if _the_jobs(f)])
        _keep_the_jobs(summary.__context__, seen)
        summary = summary.__cause__


def job_traceback(error: BaseException) -> str:
    """`error` formatted as Python would, with only the job's frames."""
    summary = traceback.TracebackException.from_exception(error)
    _keep_the_jobs(summary, set())
    return "".join(summary.format()).rstrip("\n")
