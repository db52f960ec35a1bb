"""How a backend's keyed state becomes the files of a snapshot.

A strategy takes the synchronous part of a snapshot on the task's chain
thread and returns a `KeyedUpload`, the asynchronous part, which an upload
thread runs while records keep flowing. Strategies that carry something from
one checkpoint to the next (the SST files an incremental checkpoint reuses)
learn from the notifications which checkpoints completed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from lockgate.runtime.snapshot.handles import KeyedStateHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage


class KeyedUpload(ABC):
    """The asynchronous part of one keyed snapshot: it writes the files."""

    @abstractmethod
    def run(self, storage: CheckpointStorage) -> KeyedStateHandle:
        """Write the files and return their handle; releases what the snapshot held."""

    @abstractmethod
    def cancel(self) -> None:
        """Release what the snapshot held without writing anything."""


class KeyedSnapshotStrategy(ABC):
    @abstractmethod
    def snapshot(self, checkpoint_id: int, snapshot_dir: str, subtask_path: str) -> KeyedUpload:
        """The synchronous part: capture the state as of now."""

    def notify_complete(self, checkpoint_id: int) -> None:  # noqa: B027 - a no-op unless overridden
        """Checkpoint `checkpoint_id` completed (and subsumes every older one). A strategy
        that carries nothing over from one checkpoint to the next (a full snapshot) ignores it."""
