"""One epoch of a FileSink writer: a hidden file, open -> prepared -> committed, or aborted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any, Literal

from lockgate.runtime.connectors.sink_file_names import FileName

# Lines are handed to the file in chunks of about this size: a write per record was
# a third of a file-to-file job's sink time (a Python call and a copy each).
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, order=True)
class Committable:
    pending: str  # file names inside the sink directory
    final: str

    def to_json(self) -> list[str]:
        return [self.pending, self.final]

    @staticmethod
    def from_json(data: Any) -> Committable:
        pending, final = data
        return Committable(str(pending), str(final))


class Transaction:
    def __init__(self, fs: Any, directory: str, name: FileName) -> None:
        self._fs = fs
        self._directory = directory
        self.name = name
        self.state: Literal["open", "prepared", "committed", "aborted"] = "open"
        self._stream: IO[bytes] | None = None
        self._lines: list[bytes] = []
        self._buffered = 0

    def write(self, lines: bytes) -> None:
        """One or more whole lines, newlines included."""
        if self.state != "open":
            raise RuntimeError(f"transaction {self.name.stem} is {self.state}; it cannot take records")
        if not lines:
            return  # an empty batch: an epoch of nothing commits no file
        self._lines.append(lines)
        self._buffered += len(lines)
        if self._buffered >= CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._lines:
            return
        if self._stream is None:
            self._stream = self._fs.open(f"{self._directory}/{self.name.in_progress}", "wb")
        self._stream.write(b"".join(self._lines))
        self._lines.clear()
        self._buffered = 0

    def prepare(self, checkpoint_id: int) -> Committable | None:
        if self.state != "open":
            raise RuntimeError(f"transaction {self.name.stem} is {self.state}; only an open one can prepare")
        self._flush()
        self.state = "prepared"
        if self._stream is None:
            return None  # nothing written this epoch
        self._stream.close()
        self._stream = None
        pending = self.name.pending
        self._fs.mv(f"{self._directory}/{self.name.in_progress}", f"{self._directory}/{pending}")
        return Committable(pending, self.name.final(checkpoint_id))

    def abort(self) -> None:
        self._lines.clear()
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            self._fs.rm(f"{self._directory}/{self.name.in_progress}")
        self.state = "aborted"
