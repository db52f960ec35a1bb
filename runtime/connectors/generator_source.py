"""`GeneratorSource`: deterministic records for tests and benchmarks.

Record `n` (0 <= n < count) is `record_fn(n)`, by default
`{"n": n, "key": n % keys}`. The numbers are split over `partitions` fixed
partitions (partition p yields n = p, p + partitions, ...), whose offsets are
checkpointed like any source's. `rate` caps the records per second of the
whole source; `count=None` generates forever. With a count the source is
bounded: a job whose sources are all bounded ends once it has read them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.runtime.api.connectors import Backlog, Source, SourceReader, SubtaskContext
from lockgate.runtime.connectors.partitions import assigned


class GeneratorSource(Source):
    """`count` records `record_fn(n)` (default `{"n": n, "key": n % keys}`) over
    `partitions` partitions, at most `rate` per second; `count=None` generates forever."""

    def __init__(
        self,
        count: int | None,
        *,
        keys: int = 1000,
        partitions: int = 8,
        rate: float | None = None,
        record_fn: Callable[[int], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if count is not None and count < 0:
            raise ValueError(f"GeneratorSource count must be >= 0 or None, got {count}")
        if partitions < 1 or keys < 1:
            raise ValueError(f"GeneratorSource needs partitions >= 1 and keys >= 1, got {partitions}, {keys}")
        if rate is not None and rate <= 0:
            raise ValueError(f"GeneratorSource rate must be positive, got {rate}")
        self.count = count
        self.bounded = count is not None
        self.partitions = partitions
        self.rate = rate
        self.record_fn: Callable[[int], Any] = record_fn or (lambda n: {"n": n, "key": n % keys})
        self.clock = clock

    def partition_names(self) -> list[str]:
        """The names of the source's partitions, `generator-00000` on."""
        return [f"generator-{p:05d}" for p in range(self.partitions)]

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        return GeneratorReader(self, context.subtask, context.parallelism, offsets)


class GeneratorReader(SourceReader):
    def __init__(
        self, source: GeneratorSource, subtask: int, parallelism: int, offsets: dict[str, Any]
    ) -> None:
        self._source = source
        names = assigned(source.partition_names(), subtask, parallelism)
        self._next = {name: int(offsets.get(name, int(name.rsplit("-", 1)[1]))) for name in names}
        self._rate = None if source.rate is None else source.rate * (len(names) / source.partitions)
        self._started = source.clock()
        self._emitted = 0

    def _due(self, rate: float) -> int:
        """The records `rate` allows by now that were not emitted yet (negative when ahead of it)."""
        return int((self._source.clock() - self._started) * rate) - self._emitted

    def _take(self, max_records: int) -> Iterator[tuple[str, Any]]:
        """Round robin over the partitions, so all of them advance evenly."""
        budget = max_records if self._rate is None else max(0, min(max_records, self._due(self._rate)))
        taken = 0
        step = self._source.partitions
        count = self._source.count
        make = self._source.record_fn
        live = [name for name, n in self._next.items() if count is None or n < count]
        while live and taken < budget:
            for name in list(live):
                n = self._next[name]
                if (count is not None and n >= count) or taken >= budget:
                    live.remove(name)
                    continue
                yield name, make(n)
                taken += 1
                self._next[name] = n + step
        self._emitted += taken

    def poll(self, max_records: int) -> list[Any]:
        return [record for _, record in self._take(max_records)]

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        by_partition: dict[str, list[Any]] = {}
        for name, record in self._take(max_records):
            by_partition.setdefault(name, []).append(record)
        return list(by_partition.items())

    def partitions(self) -> list[str]:
        return list(self._next)

    def offsets(self) -> dict[str, Any]:
        return dict(self._next)

    def backlog(self) -> Backlog | None:
        """With a rate: the records due by now but not read yet (how far the job lags
        the generator's schedule); without one, bounded: the records left."""
        count = self._source.count
        left = None
        if count is not None:
            step = self._source.partitions
            left = sum(-(-(count - n) // step) for n in self._next.values() if n < count)
        if self._rate is None:
            return None if left is None else Backlog(records=left)
        due = self._due(self._rate)
        return Backlog(records=max(0, due) if left is None else min(max(0, due), left))

    def reached_end(self) -> bool:
        count = self._source.count
        return count is not None and all(n >= count for n in self._next.values())
