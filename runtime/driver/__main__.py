"""`spark-submit … path/to/lockgate/runtime/driver/__main__.py JOB --etcd URL [options]`
(or `python -m lockgate.runtime.driver`): the driver of
one job on the cluster spark-submit names. Exit 0 when the job finished or was
stopped with a savepoint (its path is the last line printed), 1 when it failed
(the cause on stderr), 2 on bad options or a job that does not resolve, 130 when
interrupted (SIGINT or SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from lockgate.runtime.coordination import etcd_options
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.driver.drive import drive
from lockgate.runtime.driver.options import add_job_options, settings_from
from lockgate.runtime.driver.preflight import REFUSED_INPUT, preflight
from lockgate.runtime.driver.termination import EXIT_INTERRUPTED, until_terminated
from lockgate.runtime.spark import BarrierStage, spark_session

REFUSED_OR_BAD_ETCD_OPTIONS: tuple[type[Exception], ...] = (*REFUSED_INPUT, ValueError)  # an etcd option


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="python -m lockgate.runtime.driver", description=__doc__, allow_abbrev=False
    )
    add_job_options(command)
    etcd_group = command.add_argument_group("etcd")
    etcd_group.add_argument(
        "--etcd", default=os.environ.get("LOCKGATE_ETCD"), help="etcd endpoints ($LOCKGATE_ETCD)"
    )
    etcd_options.add_security(etcd_group)
    command.add_argument("--work-dir", default=".lockgate", help="local working files (default .lockgate)")
    return command


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # spark-submit merges a Python driver's stderr into its stdout; py4j's INFO lines
    # at exit would come after the savepoint path, which must be the last line.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    command = parser()
    arguments = command.parse_args(argv)
    if not arguments.etcd:
        command.error("--etcd (or $LOCKGATE_ETCD) is required")
    try:
        settings = settings_from(arguments, Path(arguments.work_dir), fresh_by_default=False)
        etcd_config = etcd_options.config_of(arguments.etcd, arguments)
        preflight(settings, etcd_config)  # a refusal is recorded as the job's status
    except REFUSED_OR_BAD_ETCD_OPTIONS as error:
        print(f"lockgate driver: {error}", file=sys.stderr)
        return 2
    spark = spark_session(None, f"lockgate-{settings.keys.job}")
    try:
        result, totals = run_with_bounded_shutdown(
            until_terminated(drive(settings, etcd_config, BarrierStage(spark)))
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"lockgate driver: job {settings.keys.job} interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - the cause is the driver's exit message
        print(f"lockgate driver: job {settings.keys.job} failed: {error}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"job {settings.keys.job}: read {totals.read:,} records, wrote {totals.written:,}")
    if result.savepoint is not None:
        print(result.savepoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
