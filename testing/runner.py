"""`run_job`: one run of a job's dataflow in this process, to its end or to a
stop-with-savepoint, with its inputs given by the test and its outputs returned.

The run is the engine's own: the job master and checkpoint coordinator over the
in-memory control plane, one `Task` per subtask on threads, the chosen state
backend, checkpoints and savepoints in the real snapshot format — written to
fsspec's in-memory file system and deleted when the run ends, except a savepoint,
whose files the result carries.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pickle
import re
import tempfile
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem
from lockgate.runtime.api.entrypoint import BuildFunction, JobBuildError, graph_of
from lockgate.runtime.api.front_ends import RUN_JOB, FrontEndError, address_to
from lockgate.runtime.api.graph import JobGraph, Vertex
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.clock import Clock
from lockgate.runtime.connectors.collect_sink import CollectSink
from lockgate.runtime.connectors.generator_source import GeneratorSource
from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.in_process import ThreadStage, run_in_process
from lockgate.runtime.engine.job_master import RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.testing.marks import MarkedSource, Watermark
from lockgate.testing.settings import Backend, RunSettings, Savepoint, checked_settings
from lockgate.testing.stopping import BudgetedSource, ReadBudget

NAMESPACE = "testing"
CHECKPOINT_INTERVAL_S = 0.02  # short: a bounded run ends at its next checkpoint


@dataclass(frozen=True)
class JobResult:
    """What `run_job` returns: each sink's committed records, and the savepoint a stopped
    run took."""

    outputs: Mapping[str, list[Any]]
    """Per sink vertex, the records it committed, in commit order (each subtask's in its order)."""
    savepoint: Savepoint | None
    """With `stop_after_records`: what the run stopped with, for `restore=`."""
    records_read: int | None = None
    """With `stop_after_records`: the records the sources read before the stop."""
    late_records_dropped: Mapping[str, int] = field(default_factory=dict)
    """Per window vertex, the records its subtasks dropped as late in this run (a
    restored run counts only its own)."""


def run_job(
    build: BuildFunction | str,
    *,
    parallelism: int = 1,
    args: Mapping[str, str] | None = None,
    sources: Mapping[str, Iterable[Any]] | None = None,
    clock: Clock | None = None,
    stop_after_records: int | None = None,
    restore: Savepoint | None = None,
    allow_non_restored_state: bool = False,
    state_backend: Backend = "heap",
    max_parallelism: int = 128,
    timeout_s: float = 60.0,
) -> JobResult:
    """Run `build` (a function `build(env)`, or `"module:function"` or
    `"path/to/job.py:function"`) at `parallelism` and return what its sinks committed.

    - `args`: the job's arguments, strings as `lockgate run --arg k=v` gives them.
    - `sources`: per source vertex name, the records it reads instead (in order,
      from one partition); every other source is read to its current end. A
      `Watermark(ms)` among them states the source's watermark at that place, and
      a source given any takes its watermarks from its marks alone.
    - `clock`: what state TTL and processing-time timers read (`ManualClock`).
    - `stop_after_records`: stop with a savepoint once the sources read that many
      records (or all there were); `result.savepoint` resumes the job.
    - `restore`: a savepoint to start from, at any parallelism;
      `allow_non_restored_state`: drop its state that no vertex claims.

    Every sink is replaced by one that collects what it commits;
    `result.late_records_dropped` counts, per window vertex, the records it dropped as late. An exception of
    the job's code, building the dataflow or running it, is raised as itself."""
    settings = checked_settings(
        build,
        parallelism=parallelism,
        args=args,
        sources=sources,
        clock=clock,
        stop_after_records=stop_after_records,
        restore=restore,
        allow_non_restored_state=allow_non_restored_state,
        state_backend=state_backend,
        max_parallelism=max_parallelism,
        timeout_s=timeout_s,
    )
    try:
        return _on_a_loop_of_its_own(_run(settings))
    except FrontEndError as error:
        address_to(error, RUN_JOB)  # its message names run_job's arguments, not lockgate run's flags
        raise


def _on_a_loop_of_its_own(coroutine: Coroutine[Any, Any, JobResult]) -> JobResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Called from a coroutine (an async test): the run gets an event loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


class _Graphs:
    """Builds the run's graph — once for the job master, once per launch for its
    tasks — with the test's sources and collecting sinks in place."""

    def __init__(self, settings: RunSettings, reached: Callable[[], None]) -> None:
        self._settings = settings
        declared = _built(settings, _job_name(settings.label))
        names = {v.name for v in declared.sources}
        for vertex in declared.sources:
            if vertex.name in settings.marked and vertex.watermarks is None:
                index = _first_mark(settings, vertex.name)
                raise TypeError(
                    f"run_job: sources[{vertex.name!r}][{index}] is a Watermark, but source "
                    f"{vertex.name!r} is declared without a WatermarkStrategy: its records have no event "
                    "time to be late by; declare the source with watermarks=, or give it no marks"
                )
        if unknown := set(settings.sources) - names:
            raise JobDefinitionError(
                f"run_job: sources= names {', '.join(sorted(unknown))}, but the job's sources are "
                f"{', '.join(sorted(names)) or 'none'}"
            )
        self.name = declared.name
        self.source_names = sorted(names)
        run = uuid.uuid4().hex
        self.sinks = {v.name: f"{v.name}@{run}" for v in declared.sinks}  # the run's own lists
        self.budget = None
        if settings.stop_after_records is not None:
            readers = len(declared.sources) * settings.parallelism
            self.budget = ReadBudget(settings.stop_after_records, readers, reached)

    def __call__(self) -> JobGraph:
        graph = _built(self._settings, self.name)
        return replace(graph, vertices=tuple(self._vertex(v) for v in graph.vertices))

    def _vertex(self, vertex: Vertex) -> Vertex:
        if vertex.kind == "sink":
            return replace(vertex, operator=CollectSink(self.sinks[vertex.name]))
        if vertex.kind != "source":
            return vertex
        source = vertex.operator
        if vertex.name in self._settings.marked:
            source = MarkedSource(self._settings.sources[vertex.name])
        elif vertex.name in self._settings.sources:
            pickled = self._settings.sources[vertex.name]
            source = GeneratorSource(len(pickled), partitions=1, record_fn=lambda n: pickle.loads(pickled[n]))
        if self.budget is not None:
            source = BudgetedSource(source, self.budget)
        return replace(vertex, operator=source)


def _first_mark(settings: RunSettings, source: str) -> int:
    return next(
        i for i, record in enumerate(settings.sources[source]) if isinstance(pickle.loads(record), Watermark)
    )


def _built(settings: RunSettings, name: str) -> JobGraph:
    try:
        return graph_of(settings.build, name, settings.args, settings.label)
    except JobBuildError as error:
        raised = error.__cause__
        if raised is None:
            raise
        raised.add_note(f"(raised while {settings.label} built its dataflow)")
        raised.__suppress_context__ = True  # the job's own exception, as it raised it, with its own cause
        raise raised  # noqa: B904 - its cause is its own


def _job_name(label: str) -> str:
    """A valid job id from the build function's or entrypoint's name (letters,
    digits and '-'; what a job is called in a test does not matter)."""
    name = label.rpartition(":")[0].rsplit("/", 1)[-1].removesuffix(".py") or label.rsplit(".", 1)[0]
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63].strip("-") or "job"


async def _run(settings: RunSettings) -> JobResult:
    memory = fsspec.filesystem("memory")
    root = f"/lockgate-testing/{uuid.uuid4().hex}"  # the run's checkpoints and savepoints
    loop = asyncio.get_running_loop()
    reached: asyncio.Future[None] = loop.create_future()

    def tell_reached() -> None:  # from a task's thread
        loop.call_soon_threadsafe(_set, reached)

    graphs = _Graphs(settings, tell_reached)
    for name in graphs.sinks.values():
        CollectSink.reset(name)
        if settings.restore is not None:
            CollectSink.count_as_committed(name, settings.restore.committed)
    store = InMemoryStore()
    stage = ThreadStage()
    try:
        with tempfile.TemporaryDirectory(prefix="lockgate-testing-") as local:
            state = StateConfig(
                settings.state_backend, Path(local), settings.max_parallelism, clock=settings.clock
            )
            spec = JobSpec(
                settings.label,
                JobKeys(NAMESPACE, graphs.name),
                settings.parallelism,
                state,
                store,
                secret=b"\0" * 32,
                bounded=True,
                graph_factory=graphs,
            )
            ended = await within(_run_in_process(spec, stage, root, reached, settings), settings.timeout_s)
        read = None if graphs.budget is None else graphs.budget.read
        committed = frozenset().union(*(CollectSink.committed_ids(name) for name in graphs.sinks.values()))
        savepoint = None
        if ended.savepoint is not None:
            savepoint = Savepoint(_files(memory, ended.savepoint), read or 0, committed)
        outputs = {vertex: CollectSink.committed(name) for vertex, name in graphs.sinks.items()}
        return JobResult(outputs, savepoint, read, dict(stage.late_records_dropped))
    except TimeoutError:
        endless = sorted(set(graphs.source_names) - set(settings.sources))
        hint = (
            f"; a source not given in sources= may not end ({', '.join(endless)}): give its records in "
            "sources=, or stop with stop_after_records="
            if endless and settings.stop_after_records is None
            else ""
        )
        raise TimeoutError(
            f"run_job: {settings.label} did not end within {settings.timeout_s} s{hint}; give timeout_s= "
            "if it needs longer"
        ) from None
    finally:
        store.end_all_leases()
        for name in graphs.sinks.values():
            CollectSink.forget(name)
        if memory.exists(root):
            memory.rm(root, recursive=True)


async def _run_in_process(
    spec: JobSpec, stage: ThreadStage, root: str, reached: asyncio.Future[None], settings: RunSettings
) -> RunResult:
    """The run to its end; a stop-with-savepoint is asked for once `reached` (the read budget spent)."""
    restore = None
    if settings.restore is not None:
        memory = fsspec.filesystem("memory")
        for path, data in settings.restore.files.items():
            memory.pipe_file(f"{root}/restore/{path}", data)
        restore = f"memory://{root}/restore"
    return await run_in_process(
        spec,
        CheckpointStorage(f"memory://{root}/checkpoints"),
        CheckpointConfig(interval_s=CHECKPOINT_INTERVAL_S, timeout_s=settings.timeout_s),
        savepoint_dir=f"memory://{root}/savepoints",
        from_savepoint=restore,
        allow_non_restored_state=settings.allow_non_restored_state,
        stop_when=reached,
        stage=stage,
    )


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _files(memory: AbstractFileSystem, url: str) -> dict[str, bytes]:
    directory = memory._strip_protocol(url).rstrip("/")
    return {
        path.removeprefix(directory).lstrip("/"): memory.cat_file(path) for path in memory.find(directory)
    }
