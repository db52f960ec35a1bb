"""`Watermark`: a watermark a test states in a source's records for `run_job`,
and `MarkedSource`, the source that reads such a list: its records in order, each
batch ending at a mark, and the marks as the source's only watermarks."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from lockgate.runtime.api.connectors import Backlog, Source, SourceReader, SubtaskContext
from lockgate.runtime.connectors.partitions import assigned
from lockgate.runtime.engine.source_watermarks import WatermarksInStream

# GeneratorSource's name for its one partition, and its offset is the same (the
# next index into the list): a savepoint of a run given marks restores into a run
# given the same records without them, and back.
PARTITION = "generator-00000"


@dataclass(frozen=True)
class Watermark:
    """A watermark at this place in a source's records, for `run_job(sources=...)`:

        run_job(build, sources={"clicks": [click(0), click(61_000), Watermark(60_000), click(5_000)]})

    Every record after it with an event time at or before `timestamp_ms` is late.
    A source given any mark gets its watermarks from its marks alone (its
    strategy's timestamp assigner still stamps its records); the marks must not go
    backwards, and the source must be declared with a `WatermarkStrategy`."""

    timestamp_ms: int
    """Event time in milliseconds since the epoch: no record at or before it is to come."""

    def __post_init__(self) -> None:
        if isinstance(self.timestamp_ms, bool) or not isinstance(self.timestamp_ms, int):
            raise TypeError(
                f"Watermark takes an int of milliseconds since the epoch, got {self.timestamp_ms!r}"
            )


class MarkedSource(Source):
    """The pickled records and `Watermark`s of one source's list, read from one
    partition. At parallelism 2 or more the other subtasks read nothing and say
    at once that they are idle; the reading one starts after its first barrier,
    which downstream aligns behind that idleness: no record can pass a mark
    before every window knows the empty subtasks hold nothing back."""

    bounded = True

    def __init__(self, pickled: tuple[bytes, ...]) -> None:
        self._pickled = pickled

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        reads = assigned([PARTITION], context.subtask, context.parallelism) == [PARTITION]
        position = int(offsets.get(PARTITION, 0)) if reads else None
        return MarkedReader(self._pickled, position, started=context.parallelism == 1)


class MarkedReader(SourceReader, WatermarksInStream):
    def __init__(self, pickled: tuple[bytes, ...], position: int | None, *, started: bool) -> None:
        self._pickled = pickled
        self._position = position  # None: this subtask reads no partition
        self._started = started
        self._reached: list[int] = []

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        self._started = True  # its barrier follows: downstream has the other subtasks' idleness
        return []

    def poll(self, max_records: int) -> list[Any]:
        return [record for _, batch in self.poll_partitions(max_records) for record in batch]

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        if self._position is None or not self._started:
            return []
        records: list[Any] = []
        while self._position < len(self._pickled) and len(records) < max_records:
            item = pickle.loads(self._pickled[self._position])
            self._position += 1
            if isinstance(item, Watermark):
                self._reached.append(item.timestamp_ms)
                break  # the records before it go first, then the watermark
            records.append(item)
        return [(PARTITION, records)] if records else []

    def take_watermarks(self) -> list[int]:
        reached, self._reached = self._reached, []
        return reached

    def partitions(self) -> list[str]:
        return [] if self._position is None else [PARTITION]

    def offsets(self) -> dict[str, Any]:
        return {} if self._position is None else {PARTITION: self._position}

    def reached_end(self) -> bool:
        return self._position is None or self._position >= len(self._pickled)

    def backlog(self) -> Backlog | None:
        return Backlog(records=0 if self._position is None else len(self._pickled) - self._position)
