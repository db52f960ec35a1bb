"""`LogSource(url)`: a directory of append-only JSON-lines partitions (`part-*.jsonl`).

Each partition is an ordered, replayable stream; its offset is the byte
position after the last complete line read (a line still being written, with
no newline yet, waits). Files keep being followed as they grow, and new
partitions are picked up. A malformed line is an error naming the file and
line, or, with `dead_letter=URL`, is appended there with the reason.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any

import fsspec
from lockgate.runtime.api.connectors import Backlog, Source, SourceReader
from lockgate.runtime.connectors.partitions import assigned

_READ_CHUNK = 1 << 20


class MalformedRecordError(ValueError):
    """A line that is not a JSON document, with no dead-letter file configured."""


@dataclass
class _Position:
    byte: int = 0
    line: int = 0  # lines consumed, so errors can name the line number


class LogSource(Source):
    def __init__(self, url: str, dead_letter: str | None = None, pattern: str = "part-*.jsonl") -> None:
        self.url = url
        self.dead_letter = dead_letter
        self.pattern = pattern

    def open_reader(self, subtask: int, parallelism: int, offsets: dict[str, Any]) -> SourceReader:
        return LogSourceReader(self, subtask, parallelism, offsets)


class LogSourceReader(SourceReader):
    def __init__(self, source: LogSource, subtask: int, parallelism: int, offsets: dict[str, Any]) -> None:
        self._source = source
        self._subtask = subtask
        self._parallelism = parallelism
        fs, root = fsspec.core.url_to_fs(source.url)
        self._fs: Any = fs
        self._root = root.rstrip("/")
        self._positions: dict[str, _Position] = {}
        self._restored = {name: _Position(**value) for name, value in offsets.items()}
        self._pending: dict[str, bytes] = {}  # partial last line per partition
        self._at_end: dict[str, bool] = {}
        self._discover()

    def _discover(self) -> None:
        found = [posixpath.basename(p) for p in self._fs.glob(f"{self._root}/{self._source.pattern}")]
        for name in assigned(found, self._subtask, self._parallelism):
            if name not in self._positions:
                self._positions[name] = self._restored.get(name, _Position())
                self._at_end[name] = False

    def poll(self, max_records: int) -> list[Any]:
        records: list[Any] = []
        for name in sorted(self._positions):
            if len(records) >= max_records:
                break
            self._read(name, max_records - len(records), records)
        if not records:
            self._discover()
        return records

    def _read(self, name: str, budget: int, out: list[Any]) -> None:
        position = self._positions[name]
        path = f"{self._root}/{name}"
        size = int(self._fs.size(path))
        if size < position.byte:
            raise ValueError(
                f"{self._source.url}/{name} shrank to {size} bytes but was read up to byte "
                f"{position.byte}: log partitions must be append-only"
            )
        if size == position.byte:
            self._at_end[name] = True
            return
        with self._fs.open(path, "rb") as stream:
            stream.seek(position.byte)
            data = stream.read(min(_READ_CHUNK, size - position.byte))
        start = 0
        while len(out) < budget:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            line = data[start:newline]
            position.line += 1
            position.byte += newline + 1 - start
            start = newline + 1
            if line.strip():
                self._parse(name, position.line, line, out)
        self._at_end[name] = position.byte >= size or data.find(b"\n", start) < 0

    def _parse(self, name: str, line_number: int, line: bytes, out: list[Any]) -> None:
        try:
            out.append(json.loads(line))
        except ValueError as error:
            where = f"{self._source.url.rstrip('/')}/{name}:{line_number}"
            if self._source.dead_letter is None:
                raise MalformedRecordError(
                    f"{where}: not a JSON document ({error}); fix the line, or set "
                    "dead_letter= to route malformed lines to a file"
                ) from None
            self._dead_letter(where, error, line)

    def _dead_letter(self, where: str, error: Exception, line: bytes) -> None:
        entry = {"source": where, "error": str(error), "line": line.decode("utf-8", "replace")}
        assert self._source.dead_letter is not None
        fs, path = fsspec.core.url_to_fs(self._source.dead_letter)
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with fs.open(path, "ab") as stream:
            stream.write(json.dumps(entry).encode() + b"\n")

    def offsets(self) -> dict[str, Any]:
        return {name: {"byte": p.byte, "line": p.line} for name, p in self._positions.items()}

    def backlog(self) -> Backlog:
        """Bytes appended to this reader's partitions and not read yet."""
        behind = 0
        for name, position in self._positions.items():
            behind += max(0, int(self._fs.size(f"{self._root}/{name}")) - position.byte)
        return Backlog(bytes=behind)

    def reached_end(self) -> bool:
        self._discover()
        return all(self._at_end.get(name, False) for name in self._positions)
