"""The `lockgate` command line."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import sys
import traceback
from importlib.metadata import entry_points, version

from lockgate.runtime.cli import autoscaler, checkpoints, rescale, run, savepoint, verbosity
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
from lockgate.runtime.engine.job_master import JobGaveUpError

EXIT_REFUSED = 2
"""What the user gave cannot run (as argparse exits on a bad flag)."""

FAILED: tuple[type[Exception], ...] = (
    DirectoryInUseError,
    EtcdUnavailableError,
    EtcdConfigError,
    CoordinatorConflictError,
    JobFailedError,
    JobGaveUpError,
    NoUsableCheckpointError,
    RestoreBehindCommittedOutputError,
    EtcdServerError,
    JobCodeError,
    ValueError,
)
"""A failure to report as one line, without a traceback (unless --debug): exit 1."""


def _spark_failures() -> tuple[type[Exception], ...]:
    """What the Spark adapter raises for a JVM that cannot start, reported as FAILED
    are; asked for only once a command loaded the adapter: one that runs no Spark
    (`run --local`, `savepoint`, `checkpoints`) never imports pyspark for an except clause."""
    if "lockgate.runtime.spark" not in sys.modules:
        return ()
    from lockgate.runtime.spark.java import JavaError  # noqa: PLC0415 - see above
    from lockgate.runtime.spark.session import SparkStartError  # noqa: PLC0415

    return (JavaError, SparkStartError)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="lockgate",
        description="Stateful streaming on Spark, operated from Kubernetes.",
        allow_abbrev=False,
    )
    root.add_argument("--version", action="version", version=_version())
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    checkpoints.register(commands)
    savepoint.register(commands)
    rescale.register(commands)
    autoscaler.register(commands)
    run.register(commands)
    for plugin in entry_points(group="lockgate.commands"):
        plugin.load()(commands)  # e.g. `lockgate operator`, from lockgate.operator
    for command in _leaves(commands):
        verbosity.add(command)
        command.set_defaults(command_parser=command)
    for command in _all_parsers(root):
        command.allow_abbrev = False  # `--bound` is not `--bounded`: a typo must not pick a flag
    return root


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [
        parser,
        *(p for n in nested for child in dict.fromkeys(n.choices.values()) for p in _all_parsers(child)),
    ]


def _parse(root: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; flags the command does not know are refused by the command's own
    parser (its usage, not the top level's), with the flag it most likely meant."""
    arguments, unknown = root.parse_known_args(argv)
    if unknown:
        command: argparse.ArgumentParser = arguments.command_parser
        known = [option for action in command._actions for option in action.option_strings]
        flags = [word.split("=", 1)[0] for word in unknown if word.startswith("-")]
        guesses = [match for flag in flags for match in difflib.get_close_matches(flag, known, n=1)]
        hint = f" (did you mean {' or '.join(dict.fromkeys(guesses))}?)" if guesses else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return arguments


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
    arguments = _parse(parser(), argv)
    verbosity.configure(arguments)
    try:
        status: int = arguments.handler(arguments)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"lockgate {arguments.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (*REFUSED_INPUT, *FAILED, *_spark_failures()) as error:
        if arguments.debug:
            traceback.print_exc()
        print(f"lockgate {arguments.command}: {error}", file=sys.stderr)
        return EXIT_REFUSED if isinstance(error, REFUSED_INPUT) else 1
    return status
