"""How much a command says: `-v`/`-vv`/`--log-level` for the logs of the command
and of the job's tasks, `--debug` for full tracebacks of every error (the
command's and the tasks') and Spark's own reports of failed tasks.

Spark's Python workers are started by its JVM, which has this process's
environment: the level and the flag reach the tasks through it (`spark_daemon.py`
configures their logging from `LOCKGATE_LOG_LEVEL`).
"""

from __future__ import annotations

import argparse
import logging
import os

LOG_LEVEL_ENV = "LOCKGATE_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(levelname)s %(name)s: %(message)s"


def add(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group("output")
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log more: -v progress of the run (INFO), -vv everything (DEBUG)",
    )
    group.add_argument("--log-level", choices=LEVELS, type=str.upper, help="the log level (default WARNING)")
    group.add_argument(
        "--debug",
        action="store_true",
        help="full tracebacks for every error, the runtime's frames included, and Spark's own reports "
        "of failed tasks (default: the job's own traceback, once)",
    )


def configure(arguments: argparse.Namespace) -> None:
    level = arguments.log_level or ("DEBUG" if arguments.debug or arguments.verbose > 1 else None)
    level = level or ("INFO" if arguments.verbose else "WARNING")
    logging.basicConfig(level=level, format=FORMAT, force=True)
    if level != "DEBUG":
        logging.getLogger("py4j").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    os.environ[LOG_LEVEL_ENV] = level
