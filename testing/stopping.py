"""`run_job(stop_after_records=N)`: every source reads from one shared budget of N
records, and holds (reads nothing, and never says it reached its end) once the
budget is spent or its input is read, so that the job is still running when the
stop-with-savepoint comes. `reached` is set when the budget is spent, or when
every reader of every source has read all of its input."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lockgate.runtime.api.connectors import Backlog, JobIdentity, Source, SourceReader, SubtaskContext
from lockgate.runtime.engine.source_watermarks import WatermarksInStream


class ReadBudget:
    def __init__(self, records: int, readers: int, reached: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._left = records
        self._readers = readers  # how many readers will open: sources x parallelism
        self._exhausted: set[tuple[str, int]] = set()
        self._reached = reached
        self._told = False
        self.read = 0

    def take(self, wanted: int) -> int:
        with self._lock:
            granted = min(wanted, self._left)
            self._left -= granted
            return granted

    def settle(self, granted: int, used: int) -> None:
        with self._lock:
            self._left += granted - used
            self.read += used
            if self._left == 0:
                self._tell()

    def exhausted(self, reader: tuple[str, int]) -> None:
        with self._lock:
            self._exhausted.add(reader)
            if len(self._exhausted) == self._readers:
                self._tell()

    def _tell(self) -> None:
        if not self._told:
            self._told = True
            self._reached()


class BudgetedSource(Source):
    def __init__(self, inner: Source, budget: ReadBudget) -> None:
        self._inner = inner
        self._budget = budget

    def validate(self, job: JobIdentity) -> None:
        self._inner.validate(job)

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        reader = self._inner.open_reader(context, offsets)
        if isinstance(reader, WatermarksInStream):
            return BudgetedMarkedReader(reader, reader, self._budget, (context.vertex, context.subtask))
        return BudgetedReader(reader, self._budget, (context.vertex, context.subtask))


class BudgetedReader(SourceReader):
    def __init__(self, inner: SourceReader, budget: ReadBudget, name: tuple[str, int]) -> None:
        self._inner = inner
        self._budget = budget
        self._name = name

    def poll(self, max_records: int) -> list[Any]:
        granted = self._budget.take(max_records)
        records = self._inner.poll(granted) if granted else []
        self._settle(granted, len(records))
        return records

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        granted = self._budget.take(max_records)
        batches = self._inner.poll_partitions(granted) if granted else []
        self._settle(granted, sum(len(batch) for _, batch in batches))
        return batches

    def _settle(self, granted: int, used: int) -> None:
        self._budget.settle(granted, used)
        if granted and not used and self._inner.reached_end():
            self._budget.exhausted(self._name)

    def partitions(self) -> list[str]:
        return self._inner.partitions()

    def offsets(self) -> dict[str, Any]:
        return self._inner.offsets()

    def reached_end(self) -> bool:
        return False  # held until the stop-with-savepoint

    def backlog(self) -> Backlog | None:
        return self._inner.backlog()

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return self._inner.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        self._inner.commit(committables)

    def recover(self, committables: list[Any]) -> None:
        self._inner.recover(committables)

    def close(self) -> None:
        self._inner.close()


class BudgetedMarkedReader(BudgetedReader, WatermarksInStream):
    """A budgeted reader of a source given marks: its marks pass through."""

    def __init__(
        self, inner: SourceReader, marks: WatermarksInStream, budget: ReadBudget, name: tuple[str, int]
    ) -> None:
        super().__init__(inner, budget, name)
        self._marks = marks

    def take_watermarks(self) -> list[int]:
        return self._marks.take_watermarks()
