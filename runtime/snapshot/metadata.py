"""`_metadata`: the record of a complete checkpoint or savepoint.

JSON, followed by a line with its CRC-32, written last: a checkpoint without a
readable `_metadata` is incomplete and never restored from.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate.runtime.snapshot.handles import (
    KeyedStateHandle,
    OperatorStateHandle,
    keyed_handle_from_json,
)
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage, SnapshotCorruptError

FORMAT_VERSION = 1
SnapshotKind = Literal["checkpoint", "savepoint"]


@dataclass(frozen=True)
class SubtaskState:
    subtask: int
    keyed: KeyedStateHandle | None = None
    operator: OperatorStateHandle | None = None

    def size_bytes(self) -> int:
        """Bytes of every file this subtask's state references (shared files included)."""
        handles = (h for h in (self.keyed, self.operator) if h is not None)
        return sum(ref.size for handle in handles for ref in handle.files())

    def to_json(self) -> dict[str, Any]:
        return {
            "subtask": self.subtask,
            "keyed": None if self.keyed is None else self.keyed.to_json(),
            "operator": None if self.operator is None else self.operator.to_json(),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> SubtaskState:
        keyed = data.get("keyed")
        operator = data.get("operator")
        return SubtaskState(
            subtask=int(data["subtask"]),
            keyed=None if keyed is None else keyed_handle_from_json(keyed),
            operator=None if operator is None else OperatorStateHandle.from_json(operator),
        )


@dataclass(frozen=True)
class VertexState:
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "subtasks": [s.to_json() for s in self.subtasks],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> VertexState:
        return VertexState(
            parallelism=int(data["parallelism"]),
            max_parallelism=int(data["max_parallelism"]),
            subtasks=tuple(SubtaskState.from_json(s) for s in data["subtasks"]),
        )


@dataclass(frozen=True)
class CheckpointMetadata:
    job_id: str
    checkpoint_id: int
    kind: SnapshotKind
    timestamp_ms: int
    vertices: dict[str, VertexState] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "timestamp_ms": self.timestamp_ms,
            "vertices": {name: v.to_json() for name, v in self.vertices.items()},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> CheckpointMetadata:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"snapshot format version {version!r} is not supported "
                f"(this Lockgate reads version {FORMAT_VERSION})"
            )
        kind = data["kind"]
        if kind not in ("checkpoint", "savepoint"):
            raise ValueError(f"unknown snapshot kind {kind!r}")
        return CheckpointMetadata(
            job_id=str(data["job_id"]),
            checkpoint_id=int(data["checkpoint_id"]),
            kind=kind,
            timestamp_ms=int(data["timestamp_ms"]),
            vertices={n: VertexState.from_json(v) for n, v in data["vertices"].items()},
        )

    @property
    def state_bytes(self) -> int:
        """Bytes of every file the snapshot references (shared files included)."""
        return sum(subtask.size_bytes() for vertex in self.vertices.values() for subtask in vertex.subtasks)


def encode_metadata(metadata: CheckpointMetadata) -> bytes:
    body = json.dumps(metadata.to_json(), sort_keys=True).encode("utf-8")
    return body + b"\n" + f"crc32:{zlib.crc32(body):08x}\n".encode("ascii")


def decode_metadata(path: str, data: bytes) -> CheckpointMetadata:
    body, _, footer = data.rstrip(b"\n").rpartition(b"\n")
    if not footer.startswith(b"crc32:"):
        raise SnapshotCorruptError(path, "no checksum line: the file is truncated or not metadata")
    try:
        expected = int(footer[6:], 16)
    except ValueError:
        raise SnapshotCorruptError(path, "unreadable checksum line") from None
    if zlib.crc32(body) != expected:
        raise SnapshotCorruptError(path, "checksum mismatch")
    return CheckpointMetadata.from_json(json.loads(body))


def write_metadata(storage: CheckpointStorage, snapshot_dir: str, meta: CheckpointMetadata) -> None:
    """Write `_metadata` (last, after every state file): it makes the snapshot complete."""
    path = f"{snapshot_dir}/{METADATA}"
    staging = f"{snapshot_dir}/.{METADATA}.inprogress"
    storage.fs.makedirs(snapshot_dir, exist_ok=True)
    # A rename, so that a crash mid-write never leaves a `_metadata` behind.
    storage.fs.pipe_file(staging, encode_metadata(meta))
    storage.fs.mv(staging, path)


def read_metadata(storage: CheckpointStorage, snapshot_dir: str) -> CheckpointMetadata:
    path = f"{snapshot_dir}/{METADATA}"
    if not storage.exists(path):
        raise SnapshotCorruptError(path, "missing: the snapshot is incomplete")
    return decode_metadata(path, storage.fs.cat_file(path))
