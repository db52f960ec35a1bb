"""`lockgate checkpoints list|show JOB-ID`: the completed checkpoints etcd records,
and which of them were found damaged (never restored again); with `--dir URL`, or
after a local run and its etcd have stopped, what checkpoint storage holds."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

from lockgate.runtime.cli import etcd_options
from lockgate.runtime.cli.etcd_options import WORK_DIR
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.records import CompletedCheckpoint, decode
from lockgate.runtime.coordination.unusable import UnusableCheckpoint, UnusableCheckpoints
from lockgate.runtime.driver import option_types as types
from lockgate.runtime.snapshot.catalog import StoredSnapshot, stored_snapshots
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage


def register(commands: Any) -> None:
    group = commands.add_parser("checkpoints", help="list or show completed checkpoints")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the completed checkpoints and savepoints of a job")
    show = actions.add_parser("show", help="one checkpoint, with its metadata")
    for command in (listing, show):
        etcd_options.add(command)
        command.add_argument(
            "--dir",
            action="append",
            type=types.storage_url,
            metavar="URL",
            help="read checkpoint storage instead of etcd: the run's --checkpoint-dir or --savepoint-dir "
            "(repeatable). Default when no etcd is given and no `lockgate run` goes on here: "
            ".lockgate/checkpoints and .lockgate/savepoints",
        )
    show.add_argument("checkpoint_id", metavar="N", nargs="?", type=int, help="default: the latest")
    listing.set_defaults(handler=_from_where(list_checkpoints, list_stored))
    show.set_defaults(handler=_from_where(show_checkpoint, show_stored))


def _from_where(
    from_etcd: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
    from_storage: Callable[[argparse.Namespace, list[str]], int],
) -> Callable[[argparse.Namespace], int]:
    def handle(arguments: argparse.Namespace) -> int:
        directories = _storage_dirs(arguments)
        if directories is not None:
            return from_storage(arguments, directories)
        return run_with_bounded_shutdown(from_etcd(arguments))

    return handle


def _storage_dirs(arguments: argparse.Namespace) -> list[str] | None:
    """The storage to read instead of etcd: `--dir`, or a finished local run's."""
    if arguments.dir:
        return list(arguments.dir)
    if arguments.etcd or etcd_options.local_run() is not None:
        return None
    local = [WORK_DIR.resolve() / name for name in ("checkpoints", "savepoints")]
    if not local[0].is_dir():
        raise ValueError(
            "no etcd given: pass --etcd http://host:port, set LOCKGATE_ETCD, run this in the directory "
            "of a `lockgate run`, or read checkpoint storage with --dir URL"
        )
    print(
        f"(no etcd given and no `lockgate run` going on here: reading {WORK_DIR}/checkpoints and "
        f"{WORK_DIR}/savepoints; which checkpoints were found damaged only etcd knows)",
        file=sys.stderr,
    )
    return [f"file://{directory}" for directory in local if directory.is_dir()]


def _stored(arguments: argparse.Namespace, directories: list[str]) -> list[StoredSnapshot]:
    return sorted(
        (s for url in directories for s in stored_snapshots(url, arguments.job_id)),
        key=lambda s: (s.checkpoint_id is None, s.checkpoint_id or 0, s.url),
    )


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
        keys = etcd_options.job_keys(arguments)
        print(f"job {keys.namespace}/{keys.job} has no completed checkpoints")
        return 0
    rows = [("ID", "KIND", "COMPLETED (UTC)", "DURATION", "SIZE", "PARALLELISM", "RESTORE", "PATH")]
    unusable = []
    for c in completed:
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
                _parallelism(c.parallelism),
                "ok" if mark is None else "unusable",
                c.path,
            )
        )
    _print_table(rows)
    for each in unusable:
        print(f"checkpoint {each.checkpoint_id} is unusable (found {_time(each.found_ms)}): {each.reason}")
    return 0


def list_stored(arguments: argparse.Namespace, directories: list[str]) -> int:
    stored = _stored(arguments, directories)
    if not stored:
        print(f"job {arguments.job_id} has no checkpoints or savepoints in {', '.join(directories)}")
        return 0
    rows = [("ID", "KIND", "TAKEN (UTC)", "SIZE", "PARALLELISM", "METADATA", "PATH")]
    for s in stored:
        m = s.metadata
        parallelism = {} if m is None else {name: v.parallelism for name, v in m.vertices.items()}
        rows.append(
            (
                str(s.checkpoint_id if s.checkpoint_id is not None else "?"),
                "?" if m is None else m.kind,
                "?" if m is None else _time(m.timestamp_ms),
                "?" if m is None else _size(m.state_bytes),
                _parallelism(parallelism) or "?",
                "ok" if m is not None else "unreadable",
                s.url,
            )
        )
    _print_table(rows)
    for s in stored:
        if s.problem is not None:
            print(f"{s.url} cannot be restored: {s.problem}")
    return 0


def _parallelism(by_vertex: dict[str, int]) -> str:
    return ",".join(f"{v}={p}" for v, p in sorted(by_vertex.items()))


def _print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


async def show_checkpoint(arguments: argparse.Namespace) -> int:
    completed = {c.checkpoint_id: c for c in (await _completed_and_unusable(arguments))[0]}
    wanted = arguments.checkpoint_id if arguments.checkpoint_id is not None else max(completed, default=None)
    if wanted not in completed:
        known = ", ".join(map(str, sorted(completed))) or "none"
        raise ValueError(f"no completed checkpoint {wanted} for job {arguments.job_id} (completed: {known})")
    summary = completed[wanted]
    storage = CheckpointStorage(summary.path)
    metadata = await asyncio.to_thread(read_metadata, storage, storage.root)
    print(json.dumps({"summary": summary.to_json(), "metadata": metadata.to_json()}, indent=2))
    return 0


def show_stored(arguments: argparse.Namespace, directories: list[str]) -> int:
    """Checkpoint N, or the newest snapshot (by when it was taken: ids start over in a
    new etcd's history); an N that several snapshots carry is refused, naming them."""
    readable = [(s, s.metadata) for s in _stored(arguments, directories) if s.metadata is not None]
    wanted: int | None = arguments.checkpoint_id
    if wanted is None:
        found = [max(readable, key=lambda pair: pair[1].timestamp_ms)] if readable else []
    else:
        found = [pair for pair in readable if pair[1].checkpoint_id == wanted]
    if not found:
        known = ", ".join(sorted({str(m.checkpoint_id) for _, m in readable}, key=int)) or "none"
        raise ValueError(
            f"no checkpoint {wanted} of job {arguments.job_id} with readable metadata in "
            f"{', '.join(directories)} (there: {known})"
        )
    if len(found) > 1:
        raise ValueError(
            f"{len(found)} snapshots of job {arguments.job_id} are numbered {wanted} (ids start over "
            f"with a new etcd): {', '.join(s.url for s, _ in found)}; give one of them as --dir"
        )
    snapshot, metadata = found[0]
    summary = {"checkpoint_id": metadata.checkpoint_id, "kind": metadata.kind, "path": snapshot.url}
    summary |= {"timestamp_ms": metadata.timestamp_ms, "bytes": metadata.state_bytes}
    print(json.dumps({"summary": summary, "metadata": metadata.to_json()}, indent=2))
    return 0
