"""The one check of exactly-once output the tests share: nothing lost, nothing
twice, and the keyed state behind it intact.

Two jobs write the outputs checked here (tests/jobs): the running sum (records
`{"key", "n", "sum"}` for n in 0..count-1, key = n mod keys) and the word count
(`{"word", "count"}`, one record per occurrence, counts 1..k).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def final_sums(output: Iterable[dict[str, Any]]) -> dict[int, int]:
    """Each key's largest running sum: its sum over everything it saw."""
    finals: dict[int, int] = {}
    for record in output:
        finals[record["key"]] = max(finals.get(record["key"], 0), record["sum"])
    return finals


def assert_running_sums_exact(
    output: list[dict[str, Any]], count: int, keys: int, *, written_twice: frozenset[int] = frozenset()
) -> None:
    """Every n committed once — those in `written_twice` exactly twice (a fallback
    past a checkpoint that had committed them) — and every key's final sum right."""
    times = Counter(r["n"] for r in output)
    lost = sorted(set(range(count)) - set(times))
    assert not lost, (
        f"lost {len(lost)}, n {lost[0]}..{lost[-1]}: {lost[:10]}; {_where_lost(output, lost, keys)}"
    )
    twice = {n for n, k in times.items() if k == 2}
    more = {n for n, k in times.items() if k > 2}
    assert (twice, more) == (set(written_twice), set()), (
        f"written twice: {sorted(twice - written_twice)[:10]} unexpectedly, "
        f"{sorted(written_twice - twice)[:10]} not; more often: {sorted(more)[:10]}"
    )
    expected = {k: sum(range(k, count, keys)) for k in range(keys)}
    assert final_sums(output) == expected, "a key's state was lost or counted twice"


def _where_lost(output: list[dict[str, Any]], lost: list[int], keys: int) -> str:
    """Whether the operator counted the lost records: a key's running sum counts
    every n it saw, so its largest sum less the n's in the output is what it
    counted that the output lacks (each seen n counted once)."""
    seen_by_key: dict[int, set[int]] = {}
    for record in output:
        seen_by_key.setdefault(record["key"], set()).add(record["n"])
    finals = final_sums(output)
    unseen_counted = sum(finals[key] - sum(seen) for key, seen in seen_by_key.items())
    lost_keys = sorted({n % keys for n in lost})
    return (
        f"the lost n's sum to {sum(lost)} over keys {lost_keys}; the running sums counted n's "
        f"summing to {unseen_counted} that the output lacks (all of them: lost after the operator, "
        "in the sink, the broker or the reader; none: the operator never saw them)"
    )


def assert_word_counts_exact(output: Iterable[dict[str, Any]], words: Iterable[str]) -> None:
    """Each word's counts 1..k exactly once, k its occurrences."""
    expected = Counter(words)
    assert Counter((r["word"], r["count"]) for r in output) == Counter(
        (word, k) for word, n in expected.items() for k in range(1, n + 1)
    )
