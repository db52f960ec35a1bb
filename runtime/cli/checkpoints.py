"""`lockgate checkpoints list|show JOB-ID`: the completed checkpoints etcd records,
and which of them were found damaged (never restored again)."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from lockgate.runtime.cli import etcd_options
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import CompletedCheckpoint, decode
from lockgate.runtime.coordination.unusable import UnusableCheckpoint, UnusableCheckpoints
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage


def register(commands: Any) -> None:
    group = commands.add_parser("checkpoints", help="list or show completed checkpoints")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the completed checkpoints and savepoints of a job")
    etcd_options.add(listing)
    listing.set_defaults(handler=lambda a: run_with_bounded_shutdown(list_checkpoints(a)))
    show = actions.add_parser("show", help="one checkpoint, with its metadata")
    etcd_options.add(show)
    show.add_argument("checkpoint_id", metavar="N", nargs="?", type=int, help="default: the latest")
    show.set_defaults(handler=lambda a: run_with_bounded_shutdown(show_checkpoint(a)))


async def _completed(arguments: argparse.Namespace) -> list[CompletedCheckpoint]:
    return (await _completed_and_unusable(arguments))[0]


async def _completed_and_unusable(
    arguments: argparse.Namespace,
) -> tuple[list[CompletedCheckpoint], dict[int, UnusableCheckpoint]]:
    keys = etcd_options.job_keys(arguments)
    async with Etcd(etcd_options.config(arguments)) as etcd:
        rows = await etcd.get_prefix(keys.completed)
        marks = await UnusableCheckpoints(etcd, keys).all()
    completed = sorted((decode(CompletedCheckpoint, v) for _, v in rows), key=lambda c: c.checkpoint_id)
    return completed, marks


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


async def list_checkpoints(arguments: argparse.Namespace) -> int:
    completed, marks = await _completed_and_unusable(arguments)
    if not completed:
        print(f"job {arguments.namespace}/{arguments.job_id} has no completed checkpoints")
        return 0
    rows = [("ID", "KIND", "COMPLETED (UTC)", "DURATION", "SIZE", "PARALLELISM", "RESTORE", "PATH")]
    unusable = []
    for c in completed:
        parallelism = ",".join(f"{v}={p}" for v, p in sorted(c.parallelism.items()))
        mark = marks.get(c.checkpoint_id)
        if mark is not None and not mark.applies_to(c.checkpoint_id, c.path):
            mark = None
        if mark is not None:
            unusable.append(mark)
        rows.append(
            (
                str(c.checkpoint_id),
                c.kind,
                _time(c.completed_ms),
                f"{c.duration_ms} ms",
                _size(c.bytes),
                parallelism,
                "ok" if mark is None else "unusable",
                c.path,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for each in unusable:
        print(f"checkpoint {each.checkpoint_id} is unusable (found {_time(each.found_ms)}): {each.reason}")
    return 0


async def show_checkpoint(arguments: argparse.Namespace) -> int:
    completed = {c.checkpoint_id: c for c in await _completed(arguments)}
    wanted = arguments.checkpoint_id if arguments.checkpoint_id is not None else max(completed, default=None)
    if wanted not in completed:
        known = ", ".join(map(str, sorted(completed))) or "none"
        raise ValueError(f"no completed checkpoint {wanted} for job {arguments.job_id} (completed: {known})")
    summary = completed[wanted]
    storage = CheckpointStorage(summary.path)
    metadata = await asyncio.to_thread(read_metadata, storage, storage.root)
    print(json.dumps({"summary": summary.to_json(), "metadata": metadata.to_json()}, indent=2))
    return 0
