"""Key groups: the unit in which keyed state is partitioned and redistributed.

`max_parallelism` (M) key groups exist for the life of a job's state; each of
the P subtasks owns a contiguous range of them (Flink's KeyGroupRangeAssignment).
"""

from __future__ import annotations

import mmh3
from lockgate.runtime.key_serializer import Key, serialize_key

UPPER_BOUND_MAX_PARALLELISM = 32768
"""Key groups are stored as two big-endian bytes, and Flink uses the same bound."""

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}"
        )


def _check_parallelism(max_parallelism: int, parallelism: int) -> None:
    _check_max_parallelism(max_parallelism)
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(
            f"parallelism must be between 1 and max_parallelism={max_parallelism}, got {parallelism}"
        )


def key_group_of_bytes(key_bytes: bytes, max_parallelism: int) -> int:
    """Key group of already serialized key bytes (the hot path skips re-validation)."""
    return mmh3.hash(key_bytes, 0, False) % max_parallelism


def key_group(key: Key, max_parallelism: int) -> int:
    """murmur3_32 of the key's stable bytes, modulo max parallelism."""
    _check_max_parallelism(max_parallelism)
    return key_group_of_bytes(serialize_key(key), max_parallelism)


def operator_index(key_group: int, max_parallelism: int, parallelism: int) -> int:
    """The subtask that owns `key_group` when running at `parallelism`."""
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key_group must be between 0 and {max_parallelism - 1}, got {key_group}")
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> range:
    """The contiguous key groups that subtask `index` of `parallelism` owns."""
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= index < parallelism:
        raise ValueError(
            f"subtask index must be between 0 and {parallelism - 1} (parallelism={parallelism}), got {index}"
        )
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def _next_power_of_two(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default: next power of two of 1.5 P, at least 128 and at most 32768."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, got {parallelism}")
    if parallelism > UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"parallelism must be at most {UPPER_BOUND_MAX_PARALLELISM}, got {parallelism}")
    candidate = _next_power_of_two(parallelism + parallelism // 2)
    return min(max(candidate, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)
