"""State handles: what `_metadata` records of one subtask's snapshot files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from lockgate.runtime.snapshot.storage import FileRef
from lockgate.runtime.state.backend import StateMeta


@dataclass(frozen=True)
class CanonicalKeyedHandle:
    """One file of per-(state, key group) sections with an index at its end."""

    key_groups: range
    file: FileRef
    index_sha256: str  # hex

    format: ClassVar[str] = "canonical"

    def files(self) -> Iterator[FileRef]:
        yield self.file

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "key_groups": [self.key_groups.start, self.key_groups.stop],
            "file": self.file.to_json(),
            "index_sha256": self.index_sha256,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> CanonicalKeyedHandle:
        start, stop = data["key_groups"]
        return CanonicalKeyedHandle(
            range(start, stop), FileRef.from_json(data["file"]), str(data["index_sha256"])
        )


@dataclass(frozen=True)
class NativeKeyedHandle:
    """A RocksDB checkpoint: SST files in shared storage plus private files."""

    key_groups: range
    states: dict[str, StateMeta]
    shared: dict[str, FileRef]
    private: dict[str, FileRef]

    format: ClassVar[str] = "native"

    def files(self) -> Iterator[FileRef]:
        yield from self.shared.values()
        yield from self.private.values()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "key_groups": [self.key_groups.start, self.key_groups.stop],
            "states": {name: meta.to_json() for name, meta in sorted(self.states.items())},
            "shared": {name: ref.to_json() for name, ref in sorted(self.shared.items())},
            "private": {name: ref.to_json() for name, ref in sorted(self.private.items())},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> NativeKeyedHandle:
        start, stop = data["key_groups"]
        return NativeKeyedHandle(
            key_groups=range(start, stop),
            states={n: StateMeta.from_json(m) for n, m in data["states"].items()},
            shared={n: FileRef.from_json(r) for n, r in data["shared"].items()},
            private={n: FileRef.from_json(r) for n, r in data["private"].items()},
        )


KeyedStateHandle = CanonicalKeyedHandle | NativeKeyedHandle


def keyed_handle_from_json(data: dict[str, Any]) -> KeyedStateHandle:
    kind = data.get("format")
    if kind == CanonicalKeyedHandle.format:
        return CanonicalKeyedHandle.from_json(data)
    if kind == NativeKeyedHandle.format:
        return NativeKeyedHandle.from_json(data)
    raise ValueError(f"unknown keyed state handle format {kind!r}")


@dataclass(frozen=True)
class OperatorStateHandle:
    file: FileRef

    def files(self) -> Iterator[FileRef]:
        yield self.file

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file.to_json()}

    @staticmethod
    def from_json(data: dict[str, Any]) -> OperatorStateHandle:
        return OperatorStateHandle(FileRef.from_json(data["file"]))


@dataclass(frozen=True)
class ChannelStateHandle:
    """The records a subtask's input channels held, not yet read, when it took an
    unaligned checkpoint (`engine/channel_state.py`)."""

    file: FileRef
    records: int

    def files(self) -> Iterator[FileRef]:
        yield self.file

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file.to_json(), "records": self.records}

    @staticmethod
    def from_json(data: dict[str, Any]) -> ChannelStateHandle:
        return ChannelStateHandle(FileRef.from_json(data["file"]), int(data["records"]))
