"""`lockgate rescale JOB-ID -p N`: change a running job's parallelism in place.

The running driver stops the job's tasks at a checkpoint and starts them again at
N from it, keeping its JVM and executors (`coordination/rescale_queue.py`)."""

from __future__ import annotations

import argparse
from typing import Any

from lockgate.runtime.cli import etcd_options
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_requests import await_rescale, request_rescale
from lockgate.runtime.driver import option_types as types

EXIT_REFUSED = 3
"""The driver refused the target (the job runs on as it was), or the rescale's
checkpoint failed (the job was relaunched at its old parallelism)."""


def register(commands: Any) -> None:
    command = commands.add_parser(
        "rescale",
        help="change a running job's parallelism in place, keeping its driver; prints the new one last",
    )
    etcd_options.add(command)
    command.add_argument(
        "-p",
        "--parallelism",
        type=types.integer(1),
        required=True,
        help="the parallelism to run at, at most the job's max parallelism",
    )
    command.add_argument("--id", dest="request_id", type=types.request_id, help="request id; served once")
    command.add_argument(
        "--timeout",
        type=types.positive_seconds,
        default=300.0,
        help="how long to wait, like 90s or 5m (default 5m); a request no driver took up by then expires",
    )
    command.set_defaults(handler=lambda a: run_with_bounded_shutdown(rescale(a)))


async def rescale(arguments: argparse.Namespace) -> int:
    keys = etcd_options.job_keys(arguments)
    target = arguments.parallelism
    async with Etcd(etcd_options.config(arguments)) as etcd:
        request_id = await request_rescale(
            etcd, keys, target, request_id=arguments.request_id, expires_in_s=arguments.timeout
        )
        print(
            f"rescale {request_id} of {keys.namespace}/{keys.job} to {target} requested; waiting…", flush=True
        )
        try:
            result = await await_rescale(etcd, keys, request_id, arguments.timeout)
        except TimeoutError:
            raise ValueError(
                f"no result for rescale {request_id} within {arguments.timeout:.0f} s: is the job running? "
                "A request no driver took up by then expires; ask again once it runs"
            ) from None
    if result.status != "rescaled":
        print(f"rescale {request_id} {result.status}: {result.reason}; the job runs at {result.parallelism}")
        return EXIT_REFUSED
    if result.stopped_ms is not None and result.relaunched_ms is not None:
        took = (result.relaunched_ms - result.stopped_ms) / 1000
        print(
            f"rescaled from checkpoint {result.checkpoint_id}; new tasks started {took:.1f} s after the stop"
        )
    print(result.parallelism)
    return 0
