"""The `lockgate` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import traceback
from importlib.metadata import entry_points, version

from lockgate.runtime.cli import checkpoints, run, savepoint, verbosity
from lockgate.runtime.cli.run_lock import DirectoryInUseError
from lockgate.runtime.coordination.errors import (
    CoordinatorConflictError,
    JobFailedError,
    NoUsableCheckpointError,
    RestoreBehindCommittedOutputError,
)
from lockgate.runtime.coordination.etcd import EtcdConfigError, EtcdUnavailableError
from lockgate.runtime.coordination.etcd_server import EtcdServerError
from lockgate.runtime.driver.preflight import REFUSED_INPUT
from lockgate.runtime.driver.termination import EXIT_INTERRUPTED
from lockgate.runtime.engine.job_failure import JobCodeError
from lockgate.runtime.engine.job_master import EarlierRunError, JobGaveUpError
from lockgate.runtime.spark.java import JavaError
from lockgate.runtime.spark.session import SparkStartError

EXIT_REFUSED = 2
"""What the user gave cannot run (as argparse exits on a bad flag)."""

FAILED: tuple[type[Exception], ...] = (
    DirectoryInUseError,
    EtcdUnavailableError,
    EtcdConfigError,
    CoordinatorConflictError,
    JobFailedError,
    EarlierRunError,
    JobGaveUpError,
    NoUsableCheckpointError,
    RestoreBehindCommittedOutputError,
    EtcdServerError,
    SparkStartError,
    JavaError,
    JobCodeError,
    ValueError,
)
"""A failure to report as one line, without a traceback (unless --debug): exit 1."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="lockgate", description="Stateful streaming on Spark, operated from Kubernetes."
    )
    root.add_argument("--version", action="version", version=_version())
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    checkpoints.register(commands)
    savepoint.register(commands)
    run.register(commands)
    for plugin in entry_points(group="lockgate.commands"):
        plugin.load()(commands)  # e.g. `lockgate operator`, from lockgate.operator
    for command in _leaves(commands):
        verbosity.add(command)
    return root


def _leaves(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> list[argparse.ArgumentParser]:
    """Every command a user runs (`checkpoints list` as well as `run`)."""
    leaves = []
    for command in dict.fromkeys(commands.choices.values()):
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        leaves += [leaf for n in nested for leaf in _leaves(n)] if nested else [command]
    return leaves


def _version() -> str:
    """Lockgate's, and what a run depends on: the Python and the pyspark it runs."""
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"lockgate {version('lockgate')} (Python {python}, pyspark {version('pyspark')})"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format=verbosity.FORMAT)
    arguments = parser().parse_args(argv)
    verbosity.configure(arguments)
    try:
        status: int = arguments.handler(arguments)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"lockgate {arguments.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (*REFUSED_INPUT, *FAILED) as error:
        if arguments.debug:
            traceback.print_exc()
        print(f"lockgate {arguments.command}: {error}", file=sys.stderr)
        return EXIT_REFUSED if isinstance(error, REFUSED_INPUT) else 1
    return status
