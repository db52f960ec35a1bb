"""Sink writers as the engine makes them: for a job, a subtask and a launch."""

from __future__ import annotations

from lockgate.runtime import JobIdentity, Sink, SinkWriter, WriterContext

JOB = JobIdentity("default", "job-a")


def open_writer(
    sink: Sink, subtask: int = 0, parallelism: int = 1, *, launch: int = 1, job: JobIdentity = JOB
) -> SinkWriter:
    return sink.create_writer(WriterContext(job, subtask, parallelism, launch))
