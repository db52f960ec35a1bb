"""`lockgate savepoint JOB-ID [--stop]`: ask a running job for a savepoint."""

from __future__ import annotations

import argparse
from typing import Any

from lockgate.runtime.cli import etcd_options
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_requests import await_savepoint, request_savepoint
from lockgate.runtime.driver import option_types as types


def register(commands: Any) -> None:
    command = commands.add_parser("savepoint", help="take a savepoint of a running job; prints its path last")
    etcd_options.add(command)
    command.add_argument("--stop", action="store_true", help="stop the job after the savepoint")
    command.add_argument(
        "--dir",
        type=types.storage_url,  # as `run --savepoint-dir`: every task writes there
        help="savepoint directory URL (default: the job's savepoints.dir)",
    )
    command.add_argument(
        "--id", dest="request_id", type=types.request_id, help="request id; a repeated id is served once"
    )
    command.add_argument(
        "--timeout",
        type=types.positive_seconds,  # refused before etcd is asked anything
        default=600.0,
        help="how long to wait, like 90s, 10m or plain seconds (default 600); a request no driver "
        "took up by then expires",
    )
    command.set_defaults(handler=lambda a: run_with_bounded_shutdown(take_savepoint(a)))


async def take_savepoint(arguments: argparse.Namespace) -> int:
    keys = etcd_options.job_keys(arguments)
    async with Etcd(etcd_options.config(arguments)) as etcd:
        request_id = await request_savepoint(
            etcd,
            keys,
            stop=arguments.stop,
            directory=arguments.dir,
            request_id=arguments.request_id,
            expires_in_s=arguments.timeout,
        )
        print(
            f"savepoint {request_id} requested from {keys.namespace}/{keys.job}; waiting…",
            flush=True,
        )
        try:
            result = await await_savepoint(etcd, keys, request_id, arguments.timeout)
        except TimeoutError:
            raise ValueError(
                f"no result for savepoint {request_id} within {arguments.timeout:.0f} s: is the job "
                "running? A request no driver took up by then expires; ask again once it runs"
            ) from None
        # Read: a run that stopped with it may take its embedded etcd down now.
        await etcd.delete(keys.savepoint_request(request_id))
    if result.status != "completed":
        raise ValueError(f"savepoint {request_id} failed: {result.error}")
    print(result.path)
    return 0
