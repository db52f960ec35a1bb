"""What `lockgate state ls|show|export` do (`command.py` registers them): bad input
is raised as an `OptionError`, which `lockgate` reports in one line with exit
status 2."""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from collections.abc import Callable
from typing import Any

import orjson
from lockgate.runtime.driver.options import OptionError
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey, SnapshotKeyError, read_key
from lockgate.runtime.snapshot.storage import SnapshotCorruptError
from lockgate.state.errors import StateAccessError
from lockgate.state.keys import local_key_path
from lockgate.state.rows import ReadOptions
from lockgate.state.saved import OperatorInfo, SavedState, open_snapshot, snapshot_storage


def _refusing_bad_input(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @functools.wraps(handler)
    def handle(arguments: argparse.Namespace) -> int:
        try:
            return handler(arguments)
        except (StateAccessError, SnapshotCorruptError, SnapshotKeyError) as error:
            raise OptionError(str(error)) from error

    return handle


def _key(arguments: argparse.Namespace) -> SnapshotKey | None:
    if arguments.unsigned:
        return None
    if arguments.snapshot_key_file is not None:
        return read_key(arguments.snapshot_key_file)
    job = arguments.job_id or _named_job(arguments.path)
    path = local_key_path(job, arguments.namespace)
    if not path.exists():
        raise StateAccessError(
            f"{arguments.path}: no snapshot key for job {arguments.namespace}/{job} in {path.parent}: give "
            "the job's key with --snapshot-key-file FILE (a cluster job's is its Secret's value), or "
            "--unsigned to read a snapshot you trust"
        )
    return read_key(path)


def _named_job(url: str) -> str:
    """The job a snapshot says it belongs to: which key to check it with (nothing of it
    is trusted before that key checked it)."""
    storage = snapshot_storage(url)
    return read_metadata(storage, storage.root).job_id


def _open(arguments: argparse.Namespace) -> SavedState:
    return open_snapshot(arguments.path, _key(arguments), unsigned=arguments.unsigned)


@_refusing_bad_input
def list_state(arguments: argparse.Namespace) -> int:
    saved = _open(arguments)
    meta = saved.metadata
    print(f"{meta.kind} {meta.checkpoint_id} of job {meta.job_id}: {arguments.path}")
    for info in saved.operators.values():
        _print_operator(info)
    return 0


def _print_operator(info: OperatorInfo) -> None:
    print(f"\n{info.name}  parallelism {info.parallelism}, max parallelism {info.max_parallelism}")
    for subtask in info.subtasks:
        if subtask.key_groups is not None:
            groups = subtask.key_groups
            print(
                f"  subtask {subtask.index}: key groups {groups.start}..{groups.stop - 1} ({subtask.format})"
            )
    for name, state in info.states.items():
        print(f"  keyed state {name}: {state.kind.value}{', ttl' if state.ttl else ''}")
    for name, operator_state in info.operator_state.items():
        print(f"  operator state {name}: {operator_state.mode}, {operator_state.elements} elements")


def parse_key(text: str) -> Any:
    """`--key`: a Python literal (an int, a quoted string, a tuple), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@_refusing_bad_input
def show_state(arguments: argparse.Namespace) -> int:
    saved = _open(arguments)
    options = _options(arguments)
    key = None if arguments.key is None else parse_key(arguments.key)
    saved.state(arguments.operator, arguments.state, options)  # refused by name before any row
    rows = saved.rows(arguments.operator, arguments.state, options, key=key)
    out = sys.stdout.buffer
    for row in rows:
        out.write(orjson.dumps(row, default=repr, option=orjson.OPT_NON_STR_KEYS) + b"\n")
    out.flush()
    return 0


def _options(arguments: argparse.Namespace) -> ReadOptions:
    return ReadOptions(whole_lists=arguments.whole_lists)


@_refusing_bad_input
def export_state(arguments: argparse.Namespace) -> int:
    output = arguments.output
    saved = _open(arguments)
    ref = saved.state(arguments.operator, arguments.state, _options(arguments))
    # Spark starts only now, with the snapshot and the state found.
    from lockgate.runtime.spark.session import spark_session, stop_with_jvm  # noqa: PLC0415
    from lockgate.state.spark import export  # noqa: PLC0415 - Spark only for export

    spark = spark_session(arguments.master, "lockgate-state-export", {"spark.ui.enabled": "false"})
    try:
        export(spark, ref, arguments.format, output, schema=arguments.schema, partitions=arguments.partitions)
    finally:
        stop_with_jvm(spark)
    print(f"{arguments.operator}/{arguments.state} written as {arguments.format} to {output}")
    return 0
