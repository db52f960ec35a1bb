"""Corrupting a completed checkpoint on disk, as a bad disk or a partial copy would:
one byte flipped in place (same size: only a checksum notices), or a file cut short."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Literal

from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

Corruption = Literal["flip", "truncate"]


def on_local_disk(url: str) -> str:
    """The `file://` URL of a `faulty://` one (the same files, read past the faults)."""
    scheme, sep, rest = url.partition("://")
    return f"file://{rest}" if sep and scheme == "faulty" else url


def snapshot_files(url: str) -> list[str]:
    """Local paths of the non-empty state files the snapshot's `_metadata` names
    (shared SST files of incremental checkpoints included)."""
    storage = CheckpointStorage(on_local_disk(url))
    metadata = read_metadata(storage, storage.root)
    files = []
    for vertex in metadata.vertices.values():
        for subtask in vertex.subtasks:
            for handle in (subtask.keyed, subtask.operator):
                for ref in handle.files() if handle is not None else ():
                    if ref.size > 0:
                        files.append(storage.resolve(storage.root, ref))
    return sorted(set(files))


@dataclass(frozen=True)
class CorruptedFile:
    path: str
    how: Corruption
    offset: int  # the byte flipped, or the new length

    def describe(self) -> str:
        what = f"byte {self.offset} flipped" if self.how == "flip" else f"truncated to {self.offset} bytes"
        return f"{self.path}: {what}"


def corrupt(path: str, how: Corruption, rng: random.Random) -> CorruptedFile:
    size = os.path.getsize(path)
    if how == "truncate":
        length = rng.randrange(size)
        os.truncate(path, length)
        return CorruptedFile(path, how, length)
    offset = rng.randrange(size)
    with open(path, "r+b") as stream:
        stream.seek(offset)
        byte = stream.read(1)[0]
        stream.seek(offset)
        stream.write(bytes([byte ^ 0xFF]))
    return CorruptedFile(path, how, offset)


def files_only_it_holds(url: str) -> list[str]:
    """The state files of the snapshot at `url` that no other snapshot can name: its
    private files, inside its own directory. A shared SST file of incremental
    checkpoints may be in every retained checkpoint, and in the next one too (it
    completes while the damage is done): damaging one leaves nothing to fall back
    to, and the driver rightly refuses to start (a test of its own covers that
    refusal); the soak damages what a fallback can survive."""
    directory = on_local_disk(url).partition("://")[2].rstrip("/") + "/"
    return [f for f in snapshot_files(url) if f.startswith(directory)]


def corrupt_snapshot(url: str, how: Corruption, rng: random.Random) -> CorruptedFile:
    """One state file that only the snapshot at `url` holds, chosen by `rng`."""
    files = files_only_it_holds(url)
    if not files:
        raise ValueError(f"{url} holds no state file of its own to corrupt")
    return corrupt(rng.choice(files), how, rng)
