"""Where a (re)started job restores from.

An explicit savepoint is verified and used, or the run fails: the user named
it, nothing else may stand in for it. Otherwise the newest completed
checkpoint (or retained savepoint) signed by the job's key whose every file
reads back whole with its recorded size, CRC-32 and SHA-256; each newer one is
skipped with its reason logged and is marked unusable in etcd (`unusable.py`), so no later resolution tries it
again. Empty state only when the job has no completed checkpoint: when it has
some and none verifies, starting empty would re-read every source from its
beginning, so the run fails with `NoUsableCheckpointError` instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.errors import NoUsableCheckpointError
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.snapshot_key import SnapshotKey
from lockgate.runtime.snapshot.storage import METADATA, CheckpointStorage, FileRef, SnapshotCorruptError

log = logging.getLogger(__name__)

# Files checksummed at once: remote storage is read at several streams' speed.
VERIFY_THREADS = 4


@dataclass(frozen=True)
class RestorePoint:
    url: str
    metadata: CheckpointMetadata

    @property
    def storage(self) -> CheckpointStorage:
        return CheckpointStorage(self.url)

    def file_paths(self) -> list[str]:
        """Every file a restore reads, as a `SnapshotCorruptError` names it."""
        storage = self.storage
        paths = [f"{storage.root}/{METADATA}"]
        paths += (storage.resolve(storage.root, ref) for ref in _files(self.metadata))
        return list(dict.fromkeys(paths))

    def damage_named_in(self, failure: BaseException) -> tuple[str, str] | None:
        """(path, what is wrong with it) when `failure` says a file of this snapshot is
        damaged. A task's failure reaches the driver as the exception itself when the
        tasks run in-process, and only as text from Spark: the text is what is read."""
        text = "\n".join(_messages(failure))
        for path in self.file_paths():
            naming = SnapshotCorruptError.naming(path)
            start = text.find(naming)
            if start >= 0:
                return path, text[start + len(naming) :].split("\n", 1)[0].strip()
        return None


def _files(metadata: CheckpointMetadata) -> Iterator[FileRef]:
    for vertex in metadata.vertices.values():
        for subtask in vertex.subtasks:
            for handle in (subtask.keyed, subtask.operator):
                if handle is not None:
                    yield from handle.files()


def _messages(failure: BaseException) -> Iterator[str]:
    seen: set[int] = set()
    current: BaseException | None = failure
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        current = current.__cause__ or current.__context__


@dataclass(frozen=True)
class Trust:
    """What a restore accepts: snapshots `key` signed (None: any, for tests of other
    layers), and `savepoint`, named by a user who vouched for it, signed or not."""

    key: SnapshotKey | None = None
    savepoint: str | None = None

    def unsigned_allowed(self, url: str) -> bool:
        return self.savepoint is not None and url == self.savepoint


UNCHECKED = Trust()
"""Neither signs nor checks: for tests of other layers, and in-process state demos."""


def verify(url: str, trust: Trust = UNCHECKED, threads: int = VERIFY_THREADS) -> RestorePoint:
    """Read `_metadata`, check its signature, then every file it names, whole: each
    must have its recorded size, CRC-32 and SHA-256. Sizes are checked first, so a
    missing or truncated file is found before a byte is read."""
    storage = CheckpointStorage(url)
    metadata = read_metadata(storage, storage.root, trust.key, trust_unsigned=trust.unsigned_allowed(url))
    refs = list({storage.resolve(storage.root, ref): ref for ref in _files(metadata)}.values())
    for ref in refs:
        storage.check_size(storage.resolve(storage.root, ref), ref.size)
    with ThreadPoolExecutor(threads, thread_name_prefix="verify") as pool:
        # `map` raises the first failure in order and cancels the checks not yet started.
        list(pool.map(functools.partial(storage.verify_file, storage.root), refs))
    return RestorePoint(url, metadata)


async def resolve_restore_point(
    store: CompletedCheckpointStore, savepoint_url: str | None = None, trust: Trust = UNCHECKED
) -> RestorePoint | None:
    """The explicit savepoint, else the newest intact completed checkpoint, else None
    when the job has no completed checkpoint at all."""
    if savepoint_url is not None:
        return await asyncio.to_thread(verify, savepoint_url, trust)
    point, failures = await _newest_intact(store, 0, trust)
    if point is None and failures:
        raise NoUsableCheckpointError(store.keys, failures)
    return point


async def resolve_relaunch_point(
    store: CompletedCheckpointStore, first_id: int, savepoint_url: str, trust: Trust = UNCHECKED
) -> RestorePoint:
    """A relaunch of a run that began from savepoint `savepoint_url`: the newest intact
    checkpoint the run completed (numbered `first_id` or higher), else the savepoint
    again. The job's older checkpoints are another history and never restored."""
    point, failures = await _newest_intact(store, first_id, trust)
    if point is not None:
        return point
    try:
        return await asyncio.to_thread(verify, savepoint_url, trust)
    except SnapshotCorruptError as error:
        if not failures:
            raise
        raise NoUsableCheckpointError(
            store.keys, [*failures, f"savepoint {savepoint_url}: {error}"]
        ) from error


async def _newest_intact(
    store: CompletedCheckpointStore, min_id: int, trust: Trust
) -> tuple[RestorePoint | None, list[str]]:
    """The newest completed checkpoint numbered `min_id` or higher whose files all
    verify, and why each newer one was skipped."""
    marks = await store.unusable.all()
    failures: list[str] = []
    for summary in reversed([c for c in await store.all() if c.checkpoint_id >= min_id]):
        name = f"{summary.kind} {summary.checkpoint_id} ({summary.path})"
        mark = marks.get(summary.checkpoint_id)
        if mark is not None and mark.applies_to(summary.checkpoint_id, summary.path):
            reason = f"marked unusable: {mark.reason}"
        else:
            try:
                point = await asyncio.to_thread(verify, summary.path, trust)
            except SnapshotCorruptError as error:
                reason = str(error)
                await store.unusable.mark(summary.checkpoint_id, summary.path, reason)
            else:
                if failures:
                    log.warning(
                        "restoring %s, older than the latest completed checkpoint: what the job "
                        "committed after it is processed and written again (a sink cannot take "
                        "back committed output)",
                        name,
                    )
                return point, failures
        log.error("skipping %s for restore: %s", name, reason)
        failures.append(f"{name}: {reason}")
    return None, failures
