"""One partition of a `LogSource`: an append-only file read line by line from an offset.

The offset is the byte after the last complete line returned. Bytes read past it
stay in a buffer until their line is complete, so a line may be of any length.
The partition's identity is checked at every read: a file that shrank, was
deleted, or was replaced by other content under the same name (rotated,
rewritten) is an error naming it; an offset is never applied to another file.
Identity is the inode where the storage has one, and a checksum of the file's
first `FINGERPRINT_BYTES` bytes everywhere; both travel with the offset, so a
restore checks them too. (A rewrite that keeps the inode and the first 4 KiB is
not told apart from the file it replaced.)
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Any

FINGERPRINT_BYTES = 4096
READ_CHUNK_BYTES = 1 << 20

_ADVICE = (
    "log partitions must only grow: write new content to a new partition name, "
    "or start the job again without this partition's offset (--fresh, or a savepoint taken before)"
)


class LogPartitionChangedError(RuntimeError):
    """A partition is no longer the file its offset was read from."""


@dataclass(frozen=True)
class Fingerprint:
    length: int  # bytes covered, from the start of the file
    crc: int  # zlib.crc32 of those bytes
    inode: int | None  # None where the storage has no inodes

    @staticmethod
    def of(head: bytes, inode: int | None) -> Fingerprint:
        return Fingerprint(len(head), zlib.crc32(head), inode)


@dataclass
class PartitionOffset:
    """What a checkpoint keeps of a partition (the source's union operator state)."""

    byte: int = 0
    line: int = 0  # lines consumed, so errors can name the line number
    fingerprint: Fingerprint | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"byte": self.byte, "line": self.line}
        if self.fingerprint is not None:
            data["fingerprint"] = asdict(self.fingerprint)
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> PartitionOffset:
        fp = data.get("fingerprint")
        fingerprint = None if fp is None else Fingerprint(int(fp["length"]), int(fp["crc"]), fp.get("inode"))
        return PartitionOffset(int(data["byte"]), int(data["line"]), fingerprint)


class LogPartition:
    def __init__(self, fs: Any, path: str, url: str, offset: PartitionOffset) -> None:
        self._fs = fs
        self._path = path
        self.url = url  # for messages
        self.offset = offset
        self._buffer = bytearray()  # bytes from `offset.byte` on, read but not returned
        self._scanned = 0  # the buffer holds no newline before this index
        self.at_end = False  # nothing more to read now

    def take(self, budget: int) -> list[bytes]:
        """Up to `budget` complete lines (blank ones included: each is a line), the
        offset moved past them."""
        lines: list[bytes] = []
        buffer, start = self._buffer, 0
        while True:
            # The hot loop: a bytes copy of the buffer, split at newlines.
            data = bytes(buffer)
            find, scan = data.find, self._scanned
            while len(lines) < budget:
                newline = find(b"\n", scan)
                if newline < 0:
                    break
                lines.append(data[start:newline])
                start = scan = newline + 1
            if len(lines) >= budget:
                self._scanned, self.at_end = start, False
                break
            self._scanned = len(data)
            if not self._fetch():
                self.at_end = True
                break
        if start:
            del buffer[:start]
            self._scanned = max(0, self._scanned - start)
            self.offset.byte += start
            self.offset.line += len(lines)
        return lines

    def take_unterminated(self) -> bytes | None:
        """At the end of bounded input (`take` found nothing more): the last line,
        which has no newline, if the file ends with one."""
        if not self.at_end or not self._buffer or self._buffer.find(b"\n") >= 0:
            return None
        line = bytes(self._buffer)
        self.offset.byte += len(line)
        self.offset.line += 1
        self._buffer, self._scanned = bytearray(), 0
        return line

    def unread_bytes(self) -> int:
        """Bytes in the file after the offset (the buffer's included)."""
        return max(0, self._size()[0] - self.offset.byte)

    def _fetch(self) -> bool:
        """Read the next chunk after the buffer; False when the file has no more now."""
        size, inode = self._size()
        read_to = self.offset.byte + len(self._buffer)
        if size < read_to:
            raise self._changed(f"shrank to {size} bytes but was read up to byte {read_to}")
        with self._fs.open(self._path, "rb") as stream:
            self._check_identity(stream.read(min(size, FINGERPRINT_BYTES)), inode)
            if size == read_to:
                return False
            stream.seek(read_to)
            data = stream.read(min(READ_CHUNK_BYTES, size - read_to))
        self._buffer += data
        return bool(data)

    def _size(self) -> tuple[int, int | None]:
        try:
            info = self._fs.info(self._path)
        except FileNotFoundError:
            raise self._changed(f"was deleted after {self.offset.byte} bytes were read") from None
        inode = info.get("ino")
        return int(info["size"]), None if inode is None else int(inode)

    def _check_identity(self, head: bytes, inode: int | None) -> None:
        known = self.offset.fingerprint
        if known is None:
            self.offset.fingerprint = Fingerprint.of(head, inode)
            return
        if known.inode is not None and inode is not None and inode != known.inode:
            raise self._changed("was replaced by another file (its inode changed)")
        if len(head) < known.length or zlib.crc32(head[: known.length]) != known.crc:
            raise self._changed(
                f"was rewritten: its first {known.length} bytes differ from those read before"
            )
        if len(head) > known.length or (known.inode is None and inode is not None):
            self.offset.fingerprint = Fingerprint.of(head, inode)

    def _changed(self, what: str) -> LogPartitionChangedError:
        return LogPartitionChangedError(f"log partition {self.url} {what}; {_ADVICE}")
