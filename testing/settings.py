"""What `run_job` was asked for, checked before anything runs: each bad argument is
refused naming it."""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate.runtime.api.entrypoint import BuildFunction, load_build, module_entrypoint
from lockgate.runtime.clock import Clock
from lockgate.testing.marks import Watermark

Backend = Literal["heap", "rocksdb"]


@dataclass(frozen=True)
class Savepoint:
    """A savepoint `run_job(stop_after_records=...)` stopped with: its files, by
    path within the savepoint, in the format a cluster writes; a value that can
    be restored any number of times, pickled, and restored in another process."""

    files: Mapping[str, bytes] = field(repr=False)
    records_read: int  # by the run that took it
    # The ids of the sink transactions the run made visible: a restore, which
    # commits the savepoint's transactions again, skips these (sinks commit
    # idempotently), in whichever process it runs.
    committed: frozenset[str] = field(default=frozenset(), repr=False)


@dataclass(frozen=True)
class RunSettings:
    build: BuildFunction
    label: str  # how the job's code is named in errors
    parallelism: int
    args: Mapping[str, str]
    sources: Mapping[str, tuple[bytes, ...]]  # each record pickled: every read gets a fresh copy
    marked: frozenset[str]  # the sources whose records hold `Watermark`s
    clock: Clock | None
    stop_after_records: int | None
    restore: Savepoint | None
    allow_non_restored_state: bool
    state_backend: Backend
    max_parallelism: int
    timeout_s: float


def checked_settings(build: BuildFunction | str, **given: Any) -> RunSettings:
    """`run_job`'s arguments, checked; `given` holds the rest by their names."""
    if isinstance(build, str):
        label, build = build, load_build(module_entrypoint(build))
    elif callable(build):
        label = getattr(build, "__qualname__", repr(build))
    else:
        raise TypeError(f"run_job: build must be a function or 'module:function', got {build!r}")
    parallelism = _positive_int("parallelism", given["parallelism"])
    max_parallelism = _positive_int("max_parallelism", given["max_parallelism"])
    if parallelism > max_parallelism:
        raise ValueError(f"run_job: parallelism {parallelism} exceeds max_parallelism {max_parallelism}")
    stop = given["stop_after_records"]
    restore = given["restore"]
    if restore is not None and not isinstance(restore, Savepoint):
        raise TypeError(f"run_job: restore takes a result's .savepoint, got {type(restore).__name__}")
    given_sources = _listed_sources(given["sources"])
    sources = {name: _pickled(name, records) for name, records in given_sources.items()}
    return RunSettings(
        build,
        label,
        parallelism,
        _checked_args(given["args"]),
        sources,
        frozenset(name for name, records in given_sources.items() if any(_is_mark(r) for r in records)),
        _checked_clock(given["clock"]),
        None if stop is None else _positive_int("stop_after_records", stop),
        restore,
        _checked_flag("allow_non_restored_state", given["allow_non_restored_state"]),
        _checked_backend(given["state_backend"]),
        max_parallelism,
        _checked_timeout(given["timeout_s"]),
    )


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"run_job: {name} must be a positive int, got {value!r}")
    return value


def _checked_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"run_job: {name} takes True or False, got {value!r}")
    return value


def _checked_backend(value: object) -> Backend:
    if value == "heap":
        return "heap"
    if value == "rocksdb":
        return "rocksdb"
    raise ValueError(f"run_job: state_backend must be 'heap' or 'rocksdb', got {value!r}")


def _checked_clock(clock: object) -> Clock | None:
    if clock is not None and not (
        callable(getattr(clock, "now_ms", None)) and hasattr(clock, "monotonic_ms")
    ):
        raise TypeError(
            f"run_job: clock takes a clock with now_ms() and monotonic_ms() (lockgate.testing.ManualClock), "
            f"got {clock!r}"
        )
    return clock  # type: ignore[return-value]


def _checked_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"run_job: timeout_s must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _checked_args(args: object) -> dict[str, str]:
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise TypeError(f"run_job: args takes a dict of strings, got {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"run_job: args[{key!r}] = {value!r}: a job's arguments are strings, as "
                f"`lockgate run --arg {key}=...` gives them; pass str({value!r})"
            )
    return dict(args)


def _listed_sources(sources: object) -> dict[str, list[Any]]:
    if sources is None:
        return {}
    if not isinstance(sources, Mapping):
        raise TypeError(
            f"run_job: sources takes a dict of source vertex name to records, got {type(sources).__name__}"
        )
    listed = {}
    for source, records in sources.items():
        if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
            raise TypeError(
                f"run_job: sources[{source!r}] is a {type(records).__name__}; give a list of records"
            )
        listed[source] = list(records)
    return listed


def _is_mark(record: object) -> bool:
    return isinstance(record, Watermark)


def _pickled(source: str, records: list[Any]) -> tuple[bytes, ...]:
    pickled = []
    stated: tuple[int, Watermark] | None = None  # the last mark: its index and itself
    for index, record in enumerate(records):
        if isinstance(record, Watermark):
            if stated is not None and record.timestamp_ms < stated[1].timestamp_ms:
                raise TypeError(
                    f"run_job: sources[{source!r}][{index}] = {record!r} goes back behind "
                    f"sources[{source!r}][{stated[0]}] = {stated[1]!r}; a source's watermarks only rise"
                )
            stated = (index, record)
        try:
            pickled.append(pickle.dumps(record))
        except Exception as error:
            raise TypeError(
                f"run_job: sources[{source!r}][{index}] = {record!r} cannot be pickled ({error}); "
                "records cross between processes on a cluster"
            ) from error
    return tuple(pickled)
