"""Which hidden files a FileSink writer deletes when it recovers.

Every hidden file of the writer's own job and prefix that the restored
checkpoint does not hold, and that an earlier launch left, is deleted by
exactly one writer of the new launch: the one whose subtask is the old
subtask modulo the new parallelism (at a rescale, some writers clean up after
several old subtasks). Files of the writer's own launch belong to live writers
and are left alone; so are the files of a later launch (this writer is of a
deposed launch, or the job's launch count began again) — those are reported.
Another job's files, in the same directory, are never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lockgate.runtime.api.connectors import SubtaskContext
from lockgate.runtime.connectors.sink_file_names import parse_hidden


@dataclass
class Leftovers:
    delete: list[str] = field(default_factory=list)
    of_later_launches: list[str] = field(default_factory=list)


def leftovers(names: Iterable[str], prefix: str, context: SubtaskContext, keep: set[str]) -> Leftovers:
    """Of the file `names` in a sink directory, those the writer of `context` deletes
    (`keep`: the pending files of the restored checkpoint), and those of its share that
    a later launch made."""
    found = Leftovers()
    for name in names:
        parsed = parse_hidden(name)
        if parsed is None or name in keep or parsed.prefix != prefix or parsed.job != context.job:
            continue
        if parsed.subtask % context.parallelism != context.subtask:
            continue
        if parsed.launch < context.launch:
            found.delete.append(name)
        elif parsed.launch > context.launch:
            found.of_later_launches.append(name)
    return found
