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
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import fsspec
from fsspec.spec import AbstractFileSystem
from lockgate.runtime.api.entrypoint import BuildFunction, graph_of, load_build, module_entrypoint
from lockgate.runtime.api.graph import JobGraph, Vertex
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.clock import Clock
from lockgate.runtime.connectors.collect_sink import CollectSink
from lockgate.runtime.connectors.generator_source import GeneratorSource
from lockgate.runtime.coordination.cancellation import within
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.in_memory_store import InMemoryStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.savepoint_client import request_savepoint
from lockgate.runtime.engine.job_master import JobGaveUpError, JobMaster, RunResult
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.thread_stage import ThreadStage
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.testing.stopping import BudgetedSource, ReadBudget

NAMESPACE = "testing"
CHECKPOINT_INTERVAL_S = 0.02  # short: a bounded run ends at its next checkpoint


@dataclass(frozen=True)
class Savepoint:
    """A savepoint `run_job(stop_after_records=...)` stopped with: its files, by
    path within the savepoint, in the format a cluster writes."""

    files: Mapping[str, bytes] = field(repr=False)
    records_read: int  # by the run that took it


@dataclass(frozen=True)
class JobResult:
    outputs: Mapping[str, list[Any]]
    """Per sink vertex, the records it committed, in commit order (each subtask's in its order)."""
    savepoint: Savepoint | None
    """With `stop_after_records`: what the run stopped with, for `restore=`."""
    records_read: int | None = None
    """With `stop_after_records`: the records the sources read before the stop."""


def run_job(
    build: BuildFunction | str,
    *,
    parallelism: int = 1,
    args: Mapping[str, str] | None = None,
    sources: Mapping[str, Iterable[Any]] | None = None,
    clock: Clock | None = None,
    stop_after_records: int | None = None,
    restore: Savepoint | None = None,
    state_backend: Literal["heap", "rocksdb"] = "heap",
    max_parallelism: int = 128,
    timeout_s: float = 60.0,
) -> JobResult:
    """Run `build` (a function `build(env)`, or `"module:function"` or
    `"path/to/job.py:function"`) at `parallelism` and return what its sinks committed.

    - `args`: the job's arguments, strings as `lockgate run --arg k=v` gives them.
    - `sources`: per source vertex name, the records it reads instead (in order,
      from one partition); every other source is read to its current end.
    - `clock`: what state TTL and processing-time timers read (`ManualClock`).
    - `stop_after_records`: stop with a savepoint once the sources read that many
      records (or all there were); `result.savepoint` resumes the job.
    - `restore`: a savepoint to start from, at any parallelism.

    Every sink is replaced by one that collects what it commits. A failure in the
    job's code is raised as its own exception."""
    settings = _Settings.checked(
        build,
        parallelism=parallelism,
        args=args,
        sources=sources,
        stop_after_records=stop_after_records,
        restore=restore,
        max_parallelism=max_parallelism,
        timeout_s=timeout_s,
    )
    coroutine = _run(settings, clock, state_backend)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Called from a coroutine (an async test): the run gets an event loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


@dataclass(frozen=True)
class _Settings:
    build: BuildFunction
    label: str
    parallelism: int
    args: Mapping[str, str]
    sources: Mapping[str, tuple[bytes, ...]]  # each record pickled: every read gets a fresh copy
    stop_after_records: int | None
    restore: Savepoint | None
    max_parallelism: int
    timeout_s: float

    @staticmethod
    def checked(
        build: BuildFunction | str,
        *,
        parallelism: int,
        args: Mapping[str, str] | None,
        sources: Mapping[str, Iterable[Any]] | None,
        stop_after_records: int | None,
        restore: Savepoint | None,
        max_parallelism: int,
        timeout_s: float,
    ) -> _Settings:
        if isinstance(build, str):
            label, build = build, load_build(module_entrypoint(build))
        elif callable(build):
            label = getattr(build, "__qualname__", repr(build))
        else:
            raise TypeError(f"run_job: build must be a function or 'module:function', got {build!r}")
        _positive_int("parallelism", parallelism)
        _positive_int("max_parallelism", max_parallelism)
        if parallelism > max_parallelism:
            raise ValueError(f"run_job: parallelism {parallelism} exceeds max_parallelism {max_parallelism}")
        if stop_after_records is not None:
            _positive_int("stop_after_records", stop_after_records)
        if restore is not None and not isinstance(restore, Savepoint):
            raise TypeError(f"run_job: restore takes a result's .savepoint, got {type(restore).__name__}")
        if not timeout_s > 0:
            raise ValueError(f"run_job: timeout_s must be positive, got {timeout_s!r}")
        return _Settings(
            build,
            label,
            parallelism,
            _checked_args(args),
            {name: _pickled(name, records) for name, records in (sources or {}).items()},
            stop_after_records,
            restore,
            max_parallelism,
            timeout_s,
        )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"run_job: {name} must be a positive int, got {value!r}")


def _checked_args(args: Mapping[str, str] | None) -> dict[str, str]:
    for key, value in (args or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"run_job: args[{key!r}] = {value!r}: a job's arguments are strings, as "
                f"`lockgate run --arg {key}=...` gives them; pass str({value!r})"
            )
    return dict(args or {})


def _pickled(source: str, records: Iterable[Any]) -> tuple[bytes, ...]:
    if isinstance(records, (str, bytes)):
        raise TypeError(f"run_job: sources[{source!r}] is a {type(records).__name__}; give a list of records")
    pickled = []
    for index, record in enumerate(records):
        try:
            pickled.append(pickle.dumps(record))
        except Exception as error:
            raise TypeError(
                f"run_job: sources[{source!r}][{index}] = {record!r} cannot be pickled ({error}); "
                "records cross between processes on a cluster"
            ) from error
    return tuple(pickled)


class _Graphs:
    """Builds the run's graph — once for the job master, once per task, as a cluster's
    tasks each import the job — with the test's sources and collecting sinks in place."""

    def __init__(self, settings: _Settings, reached: Callable[[], None]) -> None:
        self._settings = settings
        declared = graph_of(settings.build, _job_name(settings.label), settings.args, settings.label)
        names = {v.name for v in declared.sources}
        if unknown := set(settings.sources) - names:
            raise JobDefinitionError(
                f"run_job: sources= names {', '.join(sorted(unknown))}, but the job's sources are "
                f"{', '.join(sorted(names)) or 'none'}"
            )
        self.name = declared.name
        run = uuid.uuid4().hex
        self.sinks = {v.name: f"{v.name}@{run}" for v in declared.sinks}  # the run's own lists
        self.budget = None
        if settings.stop_after_records is not None:
            readers = len(declared.sources) * settings.parallelism
            self.budget = ReadBudget(settings.stop_after_records, readers, reached)

    def __call__(self) -> JobGraph:
        s = self._settings
        graph = graph_of(s.build, self.name, s.args, s.label)
        return replace(graph, vertices=tuple(self._vertex(v) for v in graph.vertices))

    def _vertex(self, vertex: Vertex) -> Vertex:
        if vertex.kind == "sink":
            return replace(vertex, operator=CollectSink(self.sinks[vertex.name]))
        if vertex.kind != "source":
            return vertex
        source = vertex.operator
        if vertex.name in self._settings.sources:
            pickled = self._settings.sources[vertex.name]
            source = GeneratorSource(len(pickled), partitions=1, record_fn=lambda n: pickle.loads(pickled[n]))
        if self.budget is not None:
            source = BudgetedSource(source, self.budget)
        return replace(vertex, operator=source)


def _job_name(label: str) -> str:
    """A job id from the build function's or entrypoint's name."""
    name = label.rpartition(":")[0].rsplit("/", 1)[-1].removesuffix(".py") or label.rsplit(".", 1)[0]
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "job"


async def _run(
    settings: _Settings, clock: Clock | None, state_backend: Literal["heap", "rocksdb"]
) -> JobResult:
    memory = fsspec.filesystem("memory")
    root = f"/lockgate-testing/{uuid.uuid4().hex}"  # the run's checkpoints and savepoints
    loop = asyncio.get_running_loop()
    reached: asyncio.Future[None] = loop.create_future()

    def tell_reached() -> None:  # from a task's thread
        loop.call_soon_threadsafe(_set, reached)

    graphs = _Graphs(settings, tell_reached)
    for name in graphs.sinks.values():
        CollectSink.reset(name)
    try:
        with tempfile.TemporaryDirectory(prefix="lockgate-testing-") as local:
            state = StateConfig(state_backend, Path(local), settings.max_parallelism, clock=clock)
            spec = JobSpec(
                settings.label,
                JobKeys(NAMESPACE, graphs.name),
                settings.parallelism,
                state,
                InMemoryStore(),
                secret=b"\0" * 32,
                bounded=True,
                graph_factory=graphs,
            )
            ended = await within(_run_master(spec, root, reached, settings), settings.timeout_s)
        read = None if graphs.budget is None else graphs.budget.read
        savepoint = None if ended.savepoint is None else Savepoint(_files(memory, ended.savepoint), read or 0)
        outputs = {vertex: CollectSink.committed(name) for vertex, name in graphs.sinks.items()}
        return JobResult(outputs, savepoint, read)
    except TimeoutError:
        raise TimeoutError(
            f"run_job: {settings.label} did not end within {settings.timeout_s} s; give timeout_s= "
            "if it needs longer"
        ) from None
    except JobGaveUpError as gave_up:
        raise (gave_up.__cause__ or gave_up) from None  # the job's own error, as it raised it
    finally:
        for name in graphs.sinks.values():
            CollectSink.forget(name)
        if memory.exists(root):
            memory.rm(root, recursive=True)


async def _run_master(
    spec: JobSpec, root: str, reached: asyncio.Future[None], settings: _Settings
) -> RunResult:
    """The run to its end; a stop-with-savepoint is asked for once `reached` (the read budget spent)."""
    master = JobMaster(
        spec,
        ThreadStage(),
        CheckpointStorage(f"memory://{root}/checkpoints"),
        CheckpointConfig(interval_s=CHECKPOINT_INTERVAL_S, timeout_s=settings.timeout_s),
        savepoint_dir=f"memory://{root}/savepoints",
    )
    restore = None
    if settings.restore is not None:
        memory = fsspec.filesystem("memory")
        for path, data in settings.restore.files.items():
            memory.pipe_file(f"{root}/restore/{path}", data)
        restore = f"memory://{root}/restore"
    run = asyncio.ensure_future(master.run(restart_strategy("none"), from_savepoint=restore))
    try:
        either: set[asyncio.Future[Any]] = {run, reached}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if reached.done() and not run.done():
            store = spec.control_plane
            assert isinstance(store, InMemoryStore)
            await request_savepoint(store, spec.keys, stop=True, expires_in_s=settings.timeout_s)
        return await run
    finally:
        # Cancelled (the time is up): the tasks stop before the run's files are deleted.
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _files(memory: AbstractFileSystem, url: str) -> dict[str, bytes]:
    directory = memory._strip_protocol(url).rstrip("/")
    return {
        path.removeprefix(directory).lstrip("/"): memory.cat_file(path) for path in memory.find(directory)
    }
