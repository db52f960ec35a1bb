"""`_metadata`: the record of a complete checkpoint or savepoint.

JSON, followed by a line with its CRC-32 and one with its signature (the job's
snapshot key's HMAC-SHA256, `snapshot_key.py`), written last: a checkpoint
without a readable `_metadata` is incomplete and never restored from, and one
that the job's key did not sign is refused unless the user vouches for it.

The signed body names the job, its namespace and the checkpoint id, and the
coordinator records the SHA-256 of the whole file in etcd when the checkpoint
completes: a restore takes a `_metadata` only if it is the very one etcd recorded
for that checkpoint, so a signed `_metadata` of an older checkpoint copied over a
newer one (by whoever can write storage, without the key) rolls nothing back.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate.runtime.failure_class import FailureClass
from lockgate.runtime.snapshot.handles import (
    ChannelStateHandle,
    KeyedStateHandle,
    OperatorStateHandle,
    keyed_handle_from_json,
)
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage, SnapshotCorruptError

SIGNATURE = b"hmac-sha256:"
IMPORT_OPTION = "--import-unsigned-savepoint"

FORMAT_VERSION = 1
CHANNEL_STATE_FORMAT_VERSION = 2
"""Of a snapshot with channel state (taken unaligned): a Lockgate that reads only version 1
would ignore the channel state and restore it without the records in flight, so it must
refuse it. A snapshot without channel state stays version 1, readable by every release."""
READABLE_VERSIONS = (FORMAT_VERSION, CHANNEL_STATE_FORMAT_VERSION)
SnapshotKind = Literal["checkpoint", "savepoint"]


@dataclass(frozen=True)
class SubtaskState:
    subtask: int
    keyed: KeyedStateHandle | None = None
    operator: OperatorStateHandle | None = None
    channel: ChannelStateHandle | None = None  # only in a checkpoint taken unaligned

    def size_bytes(self) -> int:
        """Bytes of every file this subtask's state references (shared files included)."""
        handles = (h for h in (self.keyed, self.operator, self.channel) if h is not None)
        return sum(ref.size for handle in handles for ref in handle.files())

    def to_json(self) -> dict[str, Any]:
        data = {
            "subtask": self.subtask,
            "keyed": None if self.keyed is None else self.keyed.to_json(),
            "operator": None if self.operator is None else self.operator.to_json(),
        }
        if self.channel is not None:
            data["channel"] = self.channel.to_json()
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> SubtaskState:
        keyed = data.get("keyed")
        operator = data.get("operator")
        channel = data.get("channel")
        return SubtaskState(
            subtask=int(data["subtask"]),
            keyed=None if keyed is None else keyed_handle_from_json(keyed),
            operator=None if operator is None else OperatorStateHandle.from_json(operator),
            channel=None if channel is None else ChannelStateHandle.from_json(channel),
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
    namespace: str | None = None  # None: written before the namespace was signed

    def to_json(self) -> dict[str, Any]:
        in_flight = any(s.channel is not None for v in self.vertices.values() for s in v.subtasks)
        return {
            "format_version": CHANNEL_STATE_FORMAT_VERSION if in_flight else FORMAT_VERSION,
            "job_id": self.job_id,
            "namespace": self.namespace,
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "timestamp_ms": self.timestamp_ms,
            "vertices": {name: v.to_json() for name, v in self.vertices.items()},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> CheckpointMetadata:
        version = data.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"snapshot format version {version!r} is not supported "
                f"(this Lockgate reads versions {', '.join(map(str, READABLE_VERSIONS))})"
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
            namespace=None if data.get("namespace") is None else str(data["namespace"]),
        )

    @property
    def identity(self) -> str:
        """What the signed body says it is, for messages."""
        job = self.job_id if self.namespace is None else f"{self.namespace}/{self.job_id}"
        return f"{self.kind} {self.checkpoint_id} of job {job}"

    @property
    def state_bytes(self) -> int:
        """Bytes of every file the snapshot references (shared files included)."""
        return sum(subtask.size_bytes() for vertex in self.vertices.values() for subtask in vertex.subtasks)


class SnapshotNotSignedError(SnapshotCorruptError):
    """`_metadata` does not carry this job's signature: it must not be restored unasked."""

    failure_class = FailureClass.TRUST


def _check_signature(path: str, body: bytes, footers: list[bytes], key: SnapshotKey) -> None:
    signature = next((line[len(SIGNATURE) :] for line in footers if line.startswith(SIGNATURE)), None)
    if signature is None:
        problem = "is not signed"
    elif not key.signed(body, signature.decode("ascii", "replace")):
        problem = "is signed, but not with this job's key: another job wrote it, or it was altered"
    else:
        return
    raise SnapshotNotSignedError(
        path,
        f"{problem} (key {key.source}). Its state would be unpickled, so it is not restored: restore it "
        f"only if you trust whoever could write it, once, with {IMPORT_OPTION}",
    )


def metadata_digest(data: bytes) -> str:
    """The SHA-256 of a whole `_metadata` file, as etcd records it."""
    return hashlib.sha256(data).hexdigest()


def write_metadata(
    storage: CheckpointStorage, snapshot_dir: str, meta: CheckpointMetadata, key: SnapshotKey | None
) -> str:
    """Write `_metadata` (last, after every state file): it makes the snapshot complete.
    Returns its digest (`metadata_digest`)."""
    path = f"{snapshot_dir}/{METADATA}"
    staging = f"{snapshot_dir}/.{METADATA}.inprogress"
    storage.fs.makedirs(snapshot_dir, exist_ok=True)
    body = json.dumps(meta.to_json(), sort_keys=True).encode("utf-8")
    lines = [body, f"crc32:{zlib.crc32(body):08x}".encode("ascii")]
    if key is not None:
        lines.append(SIGNATURE + key.sign(body).encode("ascii"))
    # A rename, so that a crash mid-write never leaves a `_metadata` behind.
    data = b"\n".join(lines) + b"\n"
    storage.fs.pipe_file(staging, data)
    storage.fs.mv(staging, path)
    return metadata_digest(data)


def read_metadata(
    storage: CheckpointStorage,
    snapshot_dir: str,
    key: SnapshotKey | None = None,
    *,
    trust_unsigned: bool = False,
    digest: str | None = None,
) -> CheckpointMetadata:
    """`_metadata`'s record of `snapshot_dir`; with `key`, only if that key signed it (or
    `trust_unsigned`); with `digest`, only if it is the file of that digest, byte for
    byte. Without a key nothing is trusted to be the job's: only for looking at a
    snapshot."""
    path = f"{snapshot_dir}/{METADATA}"
    if not storage.exists(path):
        raise SnapshotCorruptError(path, "missing: the snapshot is incomplete")
    data: bytes = storage.fs.cat_file(path)
    body, *footers = data.rstrip(b"\n").split(b"\n")
    crc = next((line for line in footers if line.startswith(b"crc32:")), None)
    if crc is None:
        raise SnapshotCorruptError(path, "no checksum line: the file is truncated or not metadata")
    try:
        expected = int(crc[6:], 16)
    except ValueError:
        raise SnapshotCorruptError(path, "unreadable checksum line") from None
    if zlib.crc32(body) != expected:
        raise SnapshotCorruptError(path, "checksum mismatch")
    if digest is not None and metadata_digest(data) != digest:
        raise SnapshotCorruptError(
            path,
            "is not the one etcd recorded when this snapshot completed (its SHA-256 differs): it was "
            "replaced, e.g. by an older snapshot copied over it",
        )
    if key is not None and not trust_unsigned:
        _check_signature(path, body, footers, key)
    try:
        return CheckpointMetadata.from_json(json.loads(body))
    except (KeyError, TypeError, ValueError) as error:
        missing = f"no {error}" if isinstance(error, KeyError) else str(error)
        raise SnapshotCorruptError(
            path, f"is not metadata this Lockgate writes ({missing}): every file it names has its SHA-256"
        ) from None
