"""`LogSource(url)`: a directory of append-only JSON-lines partitions (`part-*.jsonl`).

Only the files whose names match `pattern` (default `part-*.jsonl`, e.g.
`part-0.jsonl`, `part-17.jsonl`) are read: a location that does not exist or
holds no such file is refused before a bounded run starts, and warned about
every minute, naming the location and the pattern, while an unbounded run waits
for its first file.

Each partition is an ordered, replayable stream; its offset is the byte
position after the last complete line read (a line still being written, with
no newline yet, waits; at the end of bounded input it is read as it is). Files
keep being followed as they grow, and new partitions are picked up; a
partition's subtask never changes while the job runs (`partitions.py`). A
malformed line (invalid UTF-8 included) is an error naming the file and line,
or, with `dead_letter=URL`, goes to that directory with the reason, written as
a `FileSink` writes (the reader pre-commits its dead letters at each barrier
and commits them with the checkpoint): a replay after a restore writes no dead
letter twice. `bounded=True`: the files hold all there is, so the source is
done once it has read them to their end.
"""

from __future__ import annotations

import logging
import posixpath
import time
from typing import Any

import fsspec
from lockgate.runtime.api.connectors import (
    Backlog,
    JobIdentity,
    Source,
    SourceReader,
    SubtaskContext,
    UnreadableRecordError,
)
from lockgate.runtime.connectors.dead_letters import DeadLetterPolicy
from lockgate.runtime.connectors.json_lines import decode_line, decode_lines
from lockgate.runtime.connectors.log_partition import LogPartition, PartitionOffset
from lockgate.runtime.connectors.output_location import check_url
from lockgate.runtime.connectors.partitions import assigned

log = logging.getLogger(__name__)

NO_INPUT_WARNING_INTERVAL_S = 60.0
"""How often an unbounded run that finds no file to read says so."""


class MalformedRecordError(UnreadableRecordError):
    """A line that is not a JSON document, with no dead-letter file configured."""


class LogSource(Source):
    """The JSON-lines files matching `pattern` (default `part-*.jsonl`) in the directory
    `url`, each a partition read in order and followed as it grows."""

    def __init__(
        self,
        url: str,
        dead_letter: str | None = None,
        pattern: str = "part-*.jsonl",
        *,
        bounded: bool = False,
    ) -> None:
        check_url(url)
        if not isinstance(bounded, bool):
            raise TypeError(f"LogSource {url}: bounded= takes True or False, got {bounded!r}")
        self.url = url
        self.bounded = bounded  # the files hold all there is: read to their end, then done
        self.dead_letter = DeadLetterPolicy(dead_letter)
        self.pattern = pattern

    def validate(self, job: JobIdentity) -> None:
        self.dead_letter.validate(job)

    def missing_input(self) -> str | None:
        fs, path = fsspec.core.url_to_fs(self.url)
        directory = path.rstrip("/") or path
        wanted = f"LogSource reads the files matching {self.pattern!r} in a directory"
        if not fs.exists(directory):
            return f"{self.url} does not exist ({wanted})"
        if not fs.isdir(directory):
            return f"{self.url} is a file, not a directory ({wanted}: move it into one as part-0.jsonl)"
        if fs.glob(f"{directory}/{self.pattern}"):
            return None
        held = sorted(posixpath.basename(p) for p in fs.ls(directory, detail=False))
        holds = ", ".join(held[:3]) or "nothing"
        if len(held) > 3:
            holds += f" and {len(held) - 3} more"
        return (
            f"no file in {self.url} matches {self.pattern!r} (it holds {holds}): name the files "
            "part-0.jsonl, part-1.jsonl, ..., or pass pattern= to LogSource"
        )

    def open_reader(self, context: SubtaskContext, offsets: dict[str, Any]) -> SourceReader:
        return LogSourceReader(self, context, offsets)


class LogSourceReader(SourceReader):
    def __init__(self, source: LogSource, context: SubtaskContext, offsets: dict[str, Any]) -> None:
        self._source = source
        self._subtask = context.subtask
        self._parallelism = context.parallelism
        self._dead_letters = source.dead_letter.open(context)
        self._fs, root = fsspec.core.url_to_fs(source.url)
        self._root = root.rstrip("/")
        self._partitions: dict[str, LogPartition] = {}
        self._restored = {name: PartitionOffset.from_json(value) for name, value in offsets.items()}
        self._next_no_input_warning = time.monotonic()
        self._discover()

    def _discover(self) -> None:
        """Picks up new partitions. A restored partition whose file is gone is kept,
        so that reading it fails with its name."""
        found = [posixpath.basename(p) for p in self._fs.glob(f"{self._root}/{self._source.pattern}")]
        if not found and not self._restored and self._subtask == 0:
            self._warn_no_input()
        for name in assigned({*found, *self._restored}, self._subtask, self._parallelism):
            if name not in self._partitions:
                url = f"{self._source.url.rstrip('/')}/{name}"
                offset = self._restored.get(name, PartitionOffset())
                self._partitions[name] = LogPartition(self._fs, f"{self._root}/{name}", url, offset)

    def _warn_no_input(self) -> None:
        """One subtask speaks for the source, once an interval: the others may
        legitimately have no partition of their own."""
        now = time.monotonic()
        if now < self._next_no_input_warning:
            return
        self._next_no_input_warning = now + NO_INPUT_WARNING_INTERVAL_S
        problem = self._source.missing_input()
        if problem is not None:
            log.warning("LogSource %s reads nothing yet: %s", self._source.url, problem)

    def poll(self, max_records: int) -> list[Any]:
        return [record for _, records in self.poll_partitions(max_records) for record in records]

    def poll_partitions(self, max_records: int) -> list[tuple[str, list[Any]]]:
        by_partition: list[tuple[str, list[Any]]] = []
        taken = 0
        # Partitions with lines in hand first: one found at its end is asked again
        # (a stat, an open and a checksum) only when the others leave room.
        for name in sorted(self._partitions, key=lambda name: (self._partitions[name].at_end, name)):
            if taken >= max_records:
                break
            partition = self._partitions[name]
            first_line = partition.offset.line + 1
            lines = partition.take(max_records - taken)
            if (records := decode_lines(lines)) is None:
                records = []
                for number, line in enumerate(lines, first_line):
                    if line.strip():
                        self._parse(partition, number, line, records)
            if records:
                by_partition.append((name, records))
                taken += len(records)
        if not taken:
            self._discover()
        return by_partition

    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    def end_of_input(self) -> list[Any]:
        records: list[Any] = []
        for name in sorted(self._partitions):
            partition = self._partitions[name]
            line = partition.take_unterminated()
            if line is not None and line.strip():
                self._parse(partition, partition.offset.line, line, records)
        return records

    def _parse(self, partition: LogPartition, line_number: int, line: bytes, out: list[Any]) -> None:
        try:
            out.append(decode_line(line))
        except ValueError as error:  # UnicodeDecodeError included: invalid UTF-8 is malformed too
            where = f"{partition.url}:{line_number}"
            entry = {"source": where, "error": str(error), "line": line.decode("utf-8", "replace")}
            refusal = MalformedRecordError(
                f"{where}: not a JSON document ({error}); fix the line, or set "
                "dead_letter= to route malformed lines to a file"
            )
            self._dead_letters.put(entry, refusal)

    # -- dead letters: two-phase, with the checkpoint ------------------------------------

    def pre_commit(self, checkpoint_id: int) -> list[Any]:
        return self._dead_letters.pre_commit(checkpoint_id)

    def commit(self, committables: list[Any]) -> None:
        self._dead_letters.commit(committables)

    def recover(self, committables: list[Any]) -> None:
        self._dead_letters.recover(committables)

    def close(self) -> None:
        self._dead_letters.close()

    def offsets(self) -> dict[str, Any]:
        return {name: p.offset.to_json() for name, p in self._partitions.items()}

    def backlog(self) -> Backlog:
        """Bytes appended to this reader's partitions and not read yet."""
        return Backlog(bytes=sum(p.unread_bytes() for p in self._partitions.values()))

    def reached_end(self) -> bool:
        self._discover()
        return all(p.at_end for p in self._partitions.values())
