"""How a source's partitions are shared among its subtasks.

Offsets live in union list state: on restore every subtask sees the offsets of
all partitions and keeps those it is assigned now, so partitions are re-split
at any new parallelism and partitions that appear later are picked up.

A partition's subtask depends on its own name and the parallelism only, never on
which other partitions exist: a partition that appears while the job runs moves
no partition that is being read (a subtask that took over a partition another
one reads would read it again from its restored offset — duplicates). Numbered
partitions (`part-7.jsonl`, Kafka's) go round robin by their number, an even
split; names without a number go by a stable hash of the name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import mmh3

_NUMBER = re.compile(r"(\d+)(?!.*\d)")  # the last run of digits in the name


def owner(partition: str, parallelism: int) -> int:
    """The subtask that reads `partition` at `parallelism`: round robin by its number,
    or by a stable hash of its name."""
    number = _NUMBER.search(partition)
    slot = int(number.group(1)) if number is not None else mmh3.hash(partition, signed=False)
    return slot % parallelism


def assigned(partitions: Iterable[str], subtask: int, parallelism: int) -> list[str]:
    """The partitions of `subtask`, in name order."""
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is outside parallelism {parallelism}")
    return sorted(p for p in partitions if owner(p, parallelism) == subtask)
