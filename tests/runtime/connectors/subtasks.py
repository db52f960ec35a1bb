"""Source readers and sink writers as the engine makes them: for a job, a subtask
and a launch."""

from __future__ import annotations

from typing import Any

from lockgate.runtime import JobIdentity, Sink, SinkWriter, Source, SourceReader, SubtaskContext

JOB = JobIdentity("default", "job-a")


def subtask_context(
    subtask: int = 0, parallelism: int = 1, *, launch: int = 1, job: JobIdentity = JOB
) -> SubtaskContext:
    return SubtaskContext(job, subtask, parallelism, launch)


def open_writer(
    sink: Sink, subtask: int = 0, parallelism: int = 1, *, launch: int = 1, job: JobIdentity = JOB
) -> SinkWriter:
    return sink.create_writer(subtask_context(subtask, parallelism, launch=launch, job=job))


def open_reader(
    source: Source, subtask: int = 0, parallelism: int = 1, offsets: dict[str, Any] | None = None
) -> SourceReader:
    return source.open_reader(subtask_context(subtask, parallelism), offsets or {})
