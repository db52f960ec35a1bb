"""The options every command that talks to etcd takes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lockgate.runtime.cli.run_lock import run_going_on
from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.etcd_options import add_security, config_of
from lockgate.runtime.coordination.keys import JobKeys

WORK_DIR = Path(".lockgate")
RUN_FILE = WORK_DIR / "run.json"
"""Where `lockgate run` records its etcd, so other commands in its directory find it."""


def local_run() -> dict[str, Any] | None:
    """The record of the `lockgate run` going on in this directory, if any (a killed
    run's record, left behind, is not one)."""
    if not RUN_FILE.exists() or not run_going_on(WORK_DIR):
        return None
    return json.loads(RUN_FILE.read_text())  # type: ignore[no-any-return]


def add(command: argparse.ArgumentParser) -> None:
    command.add_argument("job_id", metavar="JOB-ID", help="the job's id")
    etcd = command.add_argument_group("etcd")
    etcd.add_argument(
        "--etcd",
        default=os.environ.get("LOCKGATE_ETCD"),
        help="comma-separated etcd endpoints, http(s)://host:port (default: $LOCKGATE_ETCD, else "
        "the etcd of the `lockgate run` going on in this directory)",
    )
    etcd.add_argument("--namespace", help="the job's namespace (default: default)")
    add_security(etcd)


def config(arguments: argparse.Namespace) -> EtcdConfig:
    endpoints = arguments.etcd
    if not endpoints:
        run = local_run()
        if run is None and (WORK_DIR / "etcd").exists():
            raise ValueError(
                "the `lockgate run` of this directory is not running (it finished or was stopped), and "
                "its etcd runs only while it does: `lockgate run … --resume` continues it from its latest "
                "checkpoint; for a job elsewhere pass --etcd http://host:port or set LOCKGATE_ETCD"
            )
        if run is None:
            raise ValueError(
                "no etcd given: pass --etcd http://host:port, set LOCKGATE_ETCD, "
                "or run this in the directory of a `lockgate run`"
            )
        endpoints = run["etcd"]
    return config_of(endpoints, arguments)


def job_keys(arguments: argparse.Namespace) -> JobKeys:
    namespace = arguments.namespace
    if namespace is None:
        run = local_run() if not arguments.etcd else None
        namespace = run["namespace"] if run is not None and run["job_id"] == arguments.job_id else "default"
    return JobKeys(namespace, arguments.job_id)
