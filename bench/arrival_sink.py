"""A FileSink that also notes, on this machine's monotonic clock, when each batch
of records reaches it: the benchmarks' view of when records flow, finer than the
tasks' progress in etcd (published once a second).

`ArrivalFileSink(url, arrivals)` writes exactly what `FileSink(url)` writes (the
same two-phase commit, the same files); besides, each subtask's writer appends
`<monotonic ns> <records>` to `<arrivals>/arrivals-<launch>-<subtask>` at every
batch written into its transaction, before the write. An arrival is a sink's
write, not its commit: records reach the sink continuously, and become visible
at the checkpoint after. `mark(arrivals, what)` notes a moment of a task's life
(`<monotonic ns> <pid> <what>` in `<arrivals>/marks`).

Local to one machine (the clock is CLOCK_MONOTONIC, shared by its processes):
for `lockgate run`, whose tasks are Python workers beside the benchmark, and
for the emulated cluster's pods, which run on it too.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate.runtime import FileSink
from lockgate.runtime.api.connectors import SinkWriter, SubtaskContext

MARKS = "marks"


def mark(arrivals: str, what: str) -> None:
    with open(Path(arrivals) / MARKS, "a") as marks:  # one short append: lines do not interleave
        marks.write(f"{time.monotonic_ns()} {os.getpid()} {what}\n")


class ArrivalFileSink(FileSink):
    def __init__(self, url: str, arrivals: str) -> None:
        super().__init__(url)
        self.arrivals = arrivals

    def create_writer(self, context: SubtaskContext) -> SinkWriter:
        mark(self.arrivals, f"writer {context.launch} {context.subtask}")
        return ArrivalWriter(super().create_writer(context), self.arrivals, context)


class ArrivalWriter(SinkWriter):
    def __init__(self, inner: SinkWriter, arrivals: str, context: SubtaskContext) -> None:
        self._inner = inner
        path = Path(arrivals) / f"arrivals-{context.launch}-{context.subtask}"
        self._log = open(path, "a", buffering=1)  # noqa: SIM115 - open for the writer's life, closed in close()

    def write(self, record: Any) -> None:
        self.write_batch([record])

    def write_batch(self, records: list[Any]) -> None:
        self._log.write(f"{time.monotonic_ns()} {len(records)}\n")
        self._inner.write_batch(records)

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return self._inner.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        self._inner.commit(committables)

    def recover(self, committables: list[Any]) -> None:
        self._inner.recover(committables)

    def close(self) -> None:
        self._log.close()
        self._inner.close()


@dataclass(frozen=True)
class Arrival:
    at: float  # monotonic seconds
    records: int
    launch: int
    subtask: int


def arrivals(directory: Path) -> list[Arrival]:
    """Every batch any writer noted, in time order."""
    found = []
    for path in directory.glob("arrivals-*"):
        _, launch, subtask = path.name.split("-")
        for line in path.read_text().splitlines():
            at, records = line.split()
            found.append(Arrival(int(at) / 1e9, int(records), int(launch), int(subtask)))
    return sorted(found, key=lambda a: a.at)


def launches(directory: Path) -> dict[int, set[int]]:
    """Per launch, the subtasks that wrote at least one batch."""
    written: dict[int, set[int]] = {}
    for path in directory.glob("arrivals-*"):
        _, launch, subtask = path.name.split("-")
        if path.stat().st_size:
            written.setdefault(int(launch), set()).add(int(subtask))
    return written


@dataclass(frozen=True)
class Flow:
    """How records flowed around a change of launch, in seconds from its request."""

    downtime: float  # the longest gap between two batches of any subtask around it
    first_new: float  # until the new launch's first batch
    all_new: float  # until each of its subtasks wrote one
    last_old: float  # until the old launch's last batch


WINDOW_S = 5.0


def flow(found: list[Arrival], requested: float, old_launch: int, new_launch: int) -> Flow:
    """The flow of `found` from `requested` (monotonic) as `old_launch` made way for
    `new_launch`: gaps counted from `WINDOW_S` before the request until `WINDOW_S`
    after the last new subtask's first batch."""
    first_by_subtask: dict[int, float] = {}
    for a in found:
        if a.launch == new_launch:
            first_by_subtask.setdefault(a.subtask, a.at)
    first_new, all_new = min(first_by_subtask.values()), max(first_by_subtask.values())
    window = [a.at for a in found if requested - WINDOW_S <= a.at <= all_new + WINDOW_S]
    downtime = max(b - a for a, b in itertools.pairwise(window))
    last_old = max(a.at for a in found if a.launch == old_launch)
    return Flow(downtime, first_new - requested, all_new - requested, last_old - requested)


def marks(directory: Path) -> list[tuple[float, int, str]]:
    """(monotonic seconds, pid, what) of every mark, in time order."""
    path = directory / MARKS
    rows = [line.split(" ", 2) for line in path.read_text().splitlines()] if path.exists() else []
    return sorted((int(at) / 1e9, int(pid), what) for at, pid, what in rows)
