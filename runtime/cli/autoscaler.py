"""`lockgate autoscaler JOB-ID`: what the running driver's autoscaler decided, and
on what (the record it publishes under the job's `autoscaler` key)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from lockgate.runtime.autoscaling.status import AutoscalerStatus
from lockgate.runtime.cli import etcd_options
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import decode


def register(commands: Any) -> None:
    command = commands.add_parser(
        "autoscaler",
        help="show what a job's autoscaler decided and on what: its recommendation, inputs and last rescales",
    )
    etcd_options.add(command)
    command.add_argument("--json", action="store_true", help="the record as the driver wrote it")
    command.set_defaults(handler=lambda a: run_with_bounded_shutdown(show(a)))


async def show(arguments: argparse.Namespace) -> int:
    keys = etcd_options.job_keys(arguments)
    async with Etcd(etcd_options.config(arguments)) as etcd:
        data = await etcd.get(keys.autoscaler)
    if data is None:
        print(
            f"job {keys.namespace}/{keys.job} has no autoscaler record: it runs without --autoscale "
            "(spec.autoscaler.enabled), or its driver has not sampled it yet"
        )
        return 0
    record = decode(AutoscalerStatus, data)
    if arguments.json:
        print(json.dumps(record.to_json(), indent=2))
        return 0
    print(render(record))
    return 0


def render(record: AutoscalerStatus) -> str:
    last = record.last_decision
    lines = [
        f"parallelism {record.parallelism} (autoscaled within {record.min_replicas}:{record.max_replicas}), "
        f"recommendation {record.recommendation if record.recommendation is not None else 'none'}",
        f"{_time(last['atMs'])} {last['action']}: {last['reason']}",
    ]
    if record.history:
        lines.append("rescales:")
        lines += [
            f"  {_time(h.at_ms)} {h.from_parallelism} -> {h.to_parallelism} {h.outcome}"
            f"{f' ({h.detail})' if h.detail else ''}: {h.reason}"
            for h in record.history
        ]
    return "\n".join(lines)


def _time(at_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at_ms / 1000))
