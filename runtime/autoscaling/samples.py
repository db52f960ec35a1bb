"""A `LoadSample` from the progress records a launch's tasks publish to etcd.

Each task publishes, every second, its chains' load counters
(`TaskProgress.load`: one `SubtaskLoad` per chain) under
`tasks/progress/<launch>/<subtask>`. A sample is all of one launch's records
read at once, timed by the tasks' own clocks (the mean of their `at_ms`: the
counters were taken then, not when the driver read them). A subtask whose record
is missing, carries no load, or stands still well behind the others' is left
out of the sample, so that `series.measure` names it and takes no decision on
it; a launch that has published nothing gives no sample at all. The source
subtasks' partition counts sum to the source's partitions, which the decision's
even split divides.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lockgate.runtime.autoscaling.series import LoadSample, SubtaskLoad

STALE_S = 2.5
"""A subtask's record this much older than the newest of its launch's is stale:
its task stopped publishing (a task publishes every second)."""


def load_sample(records: Iterable[bytes], parallelism: int) -> LoadSample | None:
    """The sample the progress records of one launch (`parallelism` tasks) make,
    or None when none of them carries load counters."""
    taken: list[tuple[int, tuple[SubtaskLoad, ...]]] = []
    for value in records:
        progress: dict[str, Any] = json.loads(value)
        load = tuple(_subtask_load(chain) for chain in progress.get("load") or ())
        if load:
            taken.append((int(progress["at_ms"]), load))
    if not taken:
        return None
    newest = max(at_ms for at_ms, _ in taken)
    fresh = [(at_ms, load) for at_ms, load in taken if newest - at_ms <= STALE_S * 1000]
    at_s = sum(at_ms for at_ms, _ in fresh) / len(fresh) / 1000
    return LoadSample(at_s, parallelism, tuple(chain for _, load in fresh for chain in load))


def _subtask_load(chain: dict[str, Any]) -> SubtaskLoad:
    counts = chain.get("key_group_records")
    return SubtaskLoad(**{**chain, "key_group_records": None if counts is None else tuple(counts)})


def source_partitions(sample: LoadSample) -> int | None:
    """The partition count of the job's one source (each partition is read by one of
    its subtasks): what an even split of the source divides. None when the job has
    several sources, its source is not partitioned, or a subtask is missing."""
    sources = [s for s in sample.subtasks if s.source]
    if len({s.vertex for s in sources}) != 1 or len(sources) != sample.parallelism:
        return None
    counts = [s.partitions for s in sources]
    return None if None in counts else sum(c or 0 for c in counts)
