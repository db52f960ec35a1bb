"""The scenarios' input and reference: batches of lines the test appends to the
word count's log, and the exact output those lines must commit.

`examples.wordcount` emits {"word", "count"} with each word's running count.
Exactly once with intact keyed state means: a word seen n times has committed
the counts 1..n, each once — no count missing (loss), none twice (a replay
committed again), none beyond n (state counted twice).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from lockgate.runtime.connectors.file_sink import read_committed

VOCABULARY = [f"w{n:03d}" for n in range(200)]
PARTITIONS = 4


@dataclass
class WordLog:
    """The job's input directory: `PARTITIONS` append-only partitions."""

    directory: Path
    seed: int = 7
    seen: Counter[str] = field(default_factory=Counter)
    batches: int = 0

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._random = random.Random(self.seed)

    @property
    def url(self) -> str:
        return f"file://{self.directory}"

    def append(self, lines: int = 400, words_per_line: int = 5) -> None:
        """One batch, spread over the partitions; whole lines only (the source waits for a newline)."""
        for partition in range(PARTITIONS):
            batch = []
            for _ in range(lines // PARTITIONS):
                words = self._random.choices(VOCABULARY, k=words_per_line)
                self.seen.update(words)
                batch.append(json.dumps({"text": " ".join(words)}) + "\n")
            with (self.directory / f"part-{partition}.jsonl").open("a") as log:
                log.write("".join(batch))
        self.batches += 1

    def expected(self) -> Counter[tuple[str, int]]:
        return Counter((word, count) for word, n in self.seen.items() for count in range(1, n + 1))


def committed(output: str) -> Counter[tuple[str, int]]:
    """The records committed under the sink's URL `output` (any fsspec URL)."""
    fs, root = fsspec.core.url_to_fs(output)
    if not fs.exists(root):
        return Counter()
    records: list[dict[str, Any]] = read_committed(output)
    return Counter((r["word"], int(r["count"])) for r in records)


def difference(expected: Counter[tuple[str, int]], actual: Counter[tuple[str, int]]) -> str | None:
    """None when `actual` is exactly `expected`, else what differs, with examples."""
    missing = expected - actual
    extra = actual - expected
    if not missing and not extra:
        return None
    duplicated = [record for record, n in actual.items() if n > 1]
    return (
        f"{sum(missing.values())} records missing (e.g. {sorted(missing)[:3]}), "
        f"{sum(extra.values())} unexpected (e.g. {sorted(extra)[:3]}; duplicated: {sorted(duplicated)[:3]})"
    )
