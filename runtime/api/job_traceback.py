"""The job's part of a traceback: what a user needs to fix their job, without the
runtime's frames (or the import machinery's) that called into it."""

from __future__ import annotations

import importlib
import sysconfig
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


_LIBRARIES = tuple(
    {f"{sysconfig.get_paths()[name]}/" for name in ("stdlib", "platstdlib", "purelib", "platlib")}
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


def implicating_job_frame(
    error: BaseException, job_paths: tuple[str, ...] = ()
) -> traceback.FrameSummary | None:
    """The frame of the job's own code to blame for `error` (or its cause's, or the
    error it was raised while handling), if any. Going outward from where it was
    raised, past the standard library's and installed packages' frames: the first
    frame is the job's (the job raised it, or a library it called did), or the
    runtime's (the runtime raised it on its own, even under a job's frame: a
    connection lost while the job's function emitted a record); in that case the
    job is blamed only for a ValueError or TypeError (the runtime refusing what
    the job asked), as its nearest frame outside. `job_paths`: where the job's
    own code lies when it is an installed package."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = [f for f in traceback.extract_tb(current.__traceback__) if not _a_library(f, job_paths)]
        jobs = [i for i, f in enumerate(frames) if _the_jobs(f)]
        if jobs and (jobs[-1] == len(frames) - 1 or isinstance(current, (ValueError, TypeError))):
            return frames[jobs[-1]]
        suppressed = current.__suppress_context__
        current = current.__cause__ or (None if suppressed else current.__context__)
    return None


def _a_library(frame: traceback.FrameSummary, job_paths: tuple[str, ...]) -> bool:
    """The runtime's own frames are never a library's, even where it is installed
    among the site's packages."""
    return (
        frame.filename.startswith(_LIBRARIES)
        and _the_jobs(frame)
        and not frame.filename.startswith(job_paths)
    )
