"""A one-line progress display of a running job, read from etcd.

Tasks publish how many records they read and wrote; the coordinator publishes
completed checkpoints. On a terminal the line is redrawn in place; into a file
or pipe it is printed every 5 updates.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.kv_store import KeyValueStore


@dataclass
class Totals:
    read: int = 0
    written: int = 0
    checkpoints: int = 0
    last_checkpoint: str = "none yet"


async def read_totals(
    etcd: KeyValueStore, keys: JobKeys, store: CompletedCheckpointStore, first_launch: int = 0
) -> Totals:
    """What the tasks of launches `first_launch` on (one run's) read and wrote, over
    all those launches: a restart or a rescale starts its tasks' counts from 0."""
    totals = Totals()
    for key, value in await etcd.get_prefix(keys.progress):
        if int(key[len(keys.progress) :].split(b"/", 1)[0]) < first_launch:  # progress/<launch>/<task>
            continue
        progress = json.loads(value)
        totals.read += int(progress["read"])
        totals.written += int(progress["written"])
    completed = [c for c in await store.all() if c.kind == "checkpoint"]
    if completed:
        last = completed[-1]
        totals.checkpoints = last.checkpoint_id
        totals.last_checkpoint = f"#{last.checkpoint_id} in {last.duration_ms} ms, {last.bytes / 1e6:.1f} MB"
    return totals


def render(totals: Totals, rate: float, elapsed_s: float, restored: str | None) -> str:
    start = "empty state" if restored is None else posixpath.basename(restored.rstrip("/"))
    return (
        f"{elapsed_s:6.0f} s | read {totals.read:,} ({rate:,.0f} rec/s) | written {totals.written:,} "
        f"| checkpoint {totals.last_checkpoint} | from {start}"
    )


def read_rate(read: int, last_read: int, seconds: float) -> float:
    """Records read per second since the last look. The tasks count from 0 again
    in each launch: a count below the last one is a restart, and what it shows
    was read since."""
    since = read - last_read if read >= last_read else read
    return since / max(seconds, 1e-9)


async def show_progress(
    etcd: KeyValueStore,
    keys: JobKeys,
    store: CompletedCheckpointStore,
    out: TextIO,
    *,
    restored: Callable[[], str | None],
    first_launch: Callable[[], int],
) -> None:
    """Runs until cancelled. `restored`: what the current launch restored;
    `first_launch`: the run's first launch number (0 until it has one)."""
    tty = out.isatty()
    started = last_time = time.monotonic()
    last_read = 0
    try:
        for updates in itertools.count(1):
            await asyncio.sleep(1.0)  # the display's refresh period, not a synchronisation
            totals = await read_totals(etcd, keys, store, first_launch())
            now = time.monotonic()
            rate = read_rate(totals.read, last_read, now - last_time)
            last_read, last_time = totals.read, now
            line = render(totals, rate, now - started, restored())
            if tty:
                print("\r\033[K" + line, end="", file=out, flush=True)
            elif updates % 5 == 0:
                print(line, file=out, flush=True)
    finally:
        if tty:
            print(file=out, flush=True)
