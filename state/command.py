"""`lockgate state ls|show|export PATH …`: a savepoint's or retained checkpoint's
state, looked at from the command line. Registered through the `lockgate.commands`
entry point; bad input (no snapshot at PATH, an unknown operator or state, a
snapshot the job's key did not sign) is refused in one line with exit status 2,
before Spark starts."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockgate.runtime.driver import option_types

FORMATS = ("parquet", "jsonl")


def register(commands: Any) -> None:
    group = commands.add_parser("state", help="read a savepoint's or checkpoint's state")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = actions.add_parser("ls", help="its operators, their states, key groups and operator state")
    show = actions.add_parser("show", help="one keyed state's rows, as JSON lines")
    export = actions.add_parser("export", help="one keyed state's rows to files, with Spark")
    for command in (ls, show, export):
        command.add_argument("path", metavar="PATH", help="the snapshot's directory URL (holding _metadata)")
        _add_trust(command)
    for command in (show, export):
        command.add_argument("operator", metavar="OPERATOR", help="the vertex's name (`lockgate state ls`)")
        command.add_argument("state", metavar="STATE", help="the state's name (`lockgate state ls`)")
        command.add_argument(
            "--whole-lists", action="store_true", help="a list state as one row per list, not per element"
        )
    show.add_argument(
        "--key",
        metavar="K",
        help="only this key: a Python literal (5, 'k1', (1, 'a')), else the text as a string",
    )
    export.add_argument("--format", choices=FORMATS, required=True, help="parquet or jsonl")
    export.add_argument(
        "--output",
        required=True,
        type=option_types.storage_url,
        metavar="URL",
        help="where Spark writes the files",
    )
    export.add_argument(
        "--schema",
        metavar="DDL",
        help="the columns' types, e.g. 'key string, value long' (default: inferred)",
    )
    export.add_argument(
        "--partitions",
        type=_positive_int,
        metavar="N",
        help="how many key-group ranges Spark reads in parallel (default: one per subtask of the snapshot)",
    )
    export.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ls.set_defaults(handler=_action("list_state"))
    show.set_defaults(handler=_action("show_state"))
    export.set_defaults(handler=_action("export_state"))


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a positive number of ranges, not {text!r}")
    return int(text)


def _add_trust(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group("who wrote it (its state is unpickled: it must be the job's)")
    trust = group.add_mutually_exclusive_group()
    trust.add_argument(
        "--snapshot-key-file",
        type=Path,
        metavar="FILE",
        help="the job's snapshot key (default: the key `lockgate run` keeps in .lockgate/keys for the "
        "job the snapshot names, or for --job-id)",
    )
    group.add_argument("--job-id", help="the job whose local key checks the snapshot")
    group.add_argument("--namespace", default="default", help="the job's namespace (default: default)")
    trust.add_argument(
        "--unsigned",
        action="store_true",
        help="read it whoever wrote it: only a snapshot you trust",
    )


def _action(name: str) -> Callable[[argparse.Namespace], int]:
    """The handler `name` of `actions.py`, imported when the command runs: building
    the parser is part of every `lockgate run`'s start, and reading state needs the
    snapshot formats, RocksDB and the window operator."""

    def handle(arguments: argparse.Namespace) -> int:
        actions = importlib.import_module("lockgate.state.actions")
        return int(getattr(actions, name)(arguments))

    return handle
