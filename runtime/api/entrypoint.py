"""Resolving a job's `module:function` entrypoint and building its graph."""

from __future__ import annotations

import importlib
import keyword
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.api.job_args import JobArgumentError, MissingJobArgumentError, note_arguments
from lockgate.runtime.api.job_traceback import implicating_job_frame, job_traceback
from lockgate.runtime.api.stream import StreamEnvironment
from lockgate.runtime.api.validation import JobDefinitionError
from lockgate.runtime.failure_class import FailureClass

BuildFunction = Callable[[StreamEnvironment], object]


class JobBuildError(JobDefinitionError):
    """The job's own code failed while it was imported or built; the message holds
    its traceback (the job's frames only)."""

    failure_class = FailureClass.CODE

    def __init__(self, entrypoint: str, doing: str, error: BaseException) -> None:
        self.job_traceback = job_traceback(error)
        super().__init__(f"job {entrypoint} failed {doing}:\n{self.job_traceback}")


def _not_found(module_name: str, error: BaseException) -> bool:
    """Whether `error` says the module itself (or a package above it) is not there,
    rather than that something the module imports is missing."""
    missing = getattr(error, "name", None)
    return (
        isinstance(error, ModuleNotFoundError)
        and missing is not None
        and (module_name == missing or module_name.startswith(f"{missing}."))
    )


def module_entrypoint(entrypoint: str) -> str:
    """`module:function` for an entrypoint given as `path/to/job.py:function` too: the
    file's directory goes first on the import path (which Spark's workers get, so
    the tasks import the same file) and the file's name is the module's."""
    path, colon, function = entrypoint.rpartition(":")
    if not colon or not path.endswith(".py"):
        if entrypoint.endswith(".py"):
            raise JobDefinitionError(
                f"{entrypoint} is a Python file: name the function that builds the job, "
                f"e.g. {entrypoint}:build"
            )
        return entrypoint
    file = Path(path)
    if not file.is_file():
        raise JobDefinitionError(f"entrypoint {entrypoint!r}: there is no file {path}")
    if not file.stem.isidentifier() or keyword.iskeyword(file.stem):
        raise JobDefinitionError(
            f"entrypoint {entrypoint!r}: {file.name} cannot be imported as a module (its name is not "
            "a Python identifier); rename it, e.g. to " + re.sub(r"\W", "_", file.stem) + ".py"
        )
    imported = sys.modules.get(file.stem)
    imported_file = getattr(imported, "__file__", None)
    same_file = imported_file is not None and Path(str(imported_file)).resolve() == file.resolve()
    if file.stem in sys.stdlib_module_names or (imported is not None and not same_file):
        raise JobDefinitionError(
            f"entrypoint {entrypoint!r}: a module called {file.stem!r} is already part of Python or of "
            f"the runtime, so {file.name} would not be the one imported; rename it, e.g. to "
            f"{file.stem}_job.py"
        )
    directory = str(file.resolve().parent)
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)  # first: the file named, not another module of its name
    return f"{file.stem}:{function}"


def load_build(entrypoint: str) -> BuildFunction:
    module_name, colon, attribute = entrypoint.partition(":")
    if not colon or not module_name or not attribute:
        raise JobDefinitionError(
            f"entrypoint {entrypoint!r} must be module:function, e.g. jobs.wordcount:build"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        if not _not_found(module_name, error):
            raise JobBuildError(entrypoint, "to import", error) from error
        raise JobDefinitionError(
            f"entrypoint {entrypoint!r}: cannot import module {module_name!r} ({error}); "
            "is it on PYTHONPATH or installed in the image?"
        ) from error
    build = getattr(module, attribute, None)
    if build is None:
        public = sorted(
            name
            for name, value in vars(module).items()
            if callable(value) and getattr(value, "__module__", None) == module.__name__
        )
        raise JobDefinitionError(
            f"entrypoint {entrypoint!r}: module {module_name!r} has no {attribute!r}; "
            f"it defines: {', '.join(public) or 'none'}"
        )
    if not callable(build):
        raise JobDefinitionError(f"entrypoint {entrypoint!r} is a {type(build).__name__}, not a function")
    return build  # type: ignore[no-any-return]


def build_graph(
    entrypoint: str, job_name: str | None = None, args: Mapping[str, str] | None = None
) -> JobGraph:
    """Import the entrypoint, run `build(env)` and return the validated graph."""
    return graph_of(load_build(entrypoint), job_name or default_job_name(entrypoint), args, entrypoint)


def default_job_name(entrypoint: str) -> str:
    """The job's name when nothing names it: its module's (as `StreamEnvironment` has it)."""
    return entrypoint.partition(":")[0].rsplit(".", 1)[-1]


def graph_of(build: BuildFunction, job_name: str, args: Mapping[str, str] | None, label: str) -> JobGraph:
    """Run `build(env)` and return the validated graph; `label` names the job's code
    in the error its failure raises."""
    env = StreamEnvironment(job_name, args)
    try:
        build(env)
    except (MissingJobArgumentError, JobArgumentError) as error:
        # Its message says all there is to fix: one line, naming where the job asked.
        frame = implicating_job_frame(error)
        if frame is not None:
            error.asked_in = f"{frame.name}, {Path(frame.filename).name} line {frame.lineno}"
        raise
    except Exception as error:
        note_arguments(error, env.args)
        raise JobBuildError(label, "while building its dataflow", error) from error
    return env.graph()
