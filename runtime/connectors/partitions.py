"""How a source's partitions are shared among its subtasks.

Offsets live in union list state: on restore every subtask sees the offsets of
all partitions and keeps those it is assigned now, so partitions are re-split
at any new parallelism and partitions that appear later are picked up.
"""

from __future__ import annotations

from collections.abc import Sequence


def assigned(partitions: Sequence[str], subtask: int, parallelism: int) -> list[str]:
    """Round robin over the sorted partition names: an even split, the same in every task."""
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is outside parallelism {parallelism}")
    return [p for i, p in enumerate(sorted(partitions)) if i % parallelism == subtask]
