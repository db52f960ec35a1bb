"""Where a (re)started job restores from.

An explicit savepoint is verified and used, or the run fails: the user named
it, nothing else may stand in for it. Otherwise the newest completed
checkpoint (or retained savepoint) signed by the job's key whose every file
reads back whole with its recorded size, CRC-32 and SHA-256; each newer one is
skipped with its reason logged and is marked unusable in etcd (`unusable.py`), so no later resolution tries it
again. Empty state only when the job has no completed checkpoint: when it has
some and none verifies, starting empty would re-read every source from its
beginning, so the run fails with `NoUsableCheckpointError` instead.

A snapshot etcd recorded (every completed checkpoint, every savepoint the job
took) is restored only with the `_metadata` etcd recorded for it — the same
SHA-256 — and only if its signed body names this job, namespace and checkpoint
id: storage alone cannot swap in an older snapshot. Sinks commit an epoch only
once its checkpoint completed, so a restore older than the newest completed
checkpoint (the newer ones lost, damaged or replaced) would write committed
output again: it is refused (`RestoreBehindCommittedOutputError`) unless the run
accepts the duplicates.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lockgate.runtime.coordination.completed_store import CompletedCheckpointStore
from lockgate.runtime.coordination.errors import (
    ACCEPT_DUPLICATES_OPTION,
    NoUsableCheckpointError,
    RestoreBehindCommittedOutputError,
)
from lockgate.runtime.coordination.keys import JobKeys
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

    @property
    def name(self) -> str:
        return f"{self.metadata.kind} {self.metadata.checkpoint_id} ({self.url})"

    @property
    def records_in_flight(self) -> int:
        """Records the snapshot's channel state holds (taken unaligned): what the
        restored subtasks replay before new input."""
        return sum(
            s.channel.records
            for v in self.metadata.vertices.values()
            for s in v.subtasks
            if s.channel is not None
        )

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
            for handle in (subtask.keyed, subtask.operator, subtask.channel):
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


@dataclass(frozen=True)
class Recorded:
    """What etcd recorded of a snapshot when it completed: checkpoint `checkpoint_id`
    of the job `keys`, whose `_metadata` has the SHA-256 `metadata_sha256` (None:
    recorded before digests were)."""

    keys: JobKeys
    checkpoint_id: int
    metadata_sha256: str | None

    def check(self, path: str, metadata: CheckpointMetadata) -> None:
        """Raises SnapshotCorruptError unless the signed body says it is this snapshot."""
        keys = self.keys
        same_job = metadata.job_id == keys.job and metadata.namespace in (None, keys.namespace)
        if same_job and metadata.checkpoint_id == self.checkpoint_id:
            return
        raise SnapshotCorruptError(
            path,
            f"is signed as {metadata.identity}, but etcd recorded this snapshot as checkpoint "
            f"{self.checkpoint_id} of job {keys.namespace}/{keys.job}: another snapshot's _metadata "
            "was copied here",
        )


def verify(
    url: str, trust: Trust = UNCHECKED, recorded: Recorded | None = None, threads: int = VERIFY_THREADS
) -> RestorePoint:
    """Read `_metadata`, check its signature (and that it is the one etcd `recorded`),
    then every file it names, whole: each must have its recorded size, CRC-32 and
    SHA-256. Sizes are checked first, so a missing or truncated file is found before a
    byte is read."""
    storage = CheckpointStorage(url)
    metadata = read_metadata(
        storage,
        storage.root,
        trust.key,
        trust_unsigned=trust.unsigned_allowed(url),
        digest=None if recorded is None else recorded.metadata_sha256,
    )
    if recorded is not None:
        recorded.check(f"{storage.root}/{METADATA}", metadata)
    refs = list({storage.resolve(storage.root, ref): ref for ref in _files(metadata)}.values())
    for ref in refs:
        storage.check_size(storage.resolve(storage.root, ref), ref.size)
    with ThreadPoolExecutor(threads, thread_name_prefix="verify") as pool:
        # `map` raises the first failure in order and cancels the checks not yet started.
        list(pool.map(functools.partial(storage.verify_file, storage.root), refs))
    return RestorePoint(url, metadata)


async def resolve_restore_point(
    store: CompletedCheckpointStore,
    savepoint_url: str | None = None,
    trust: Trust = UNCHECKED,
    *,
    accept_duplicates: bool = False,
) -> RestorePoint | None:
    """The explicit savepoint, else the newest intact completed checkpoint, else None
    when the job has no completed checkpoint at all. `accept_duplicates`: restore an
    older checkpoint although a newer one completed (its output is written again)."""
    if savepoint_url is not None:
        return await _named_savepoint(store, savepoint_url, trust)
    point, failures = await _newest_intact(store, 0, trust)
    if point is None and failures:
        raise NoUsableCheckpointError(store.keys, failures)
    if point is not None:
        await _refuse_behind(store, point, failures, accept=accept_duplicates)
    return point


async def resolve_relaunch_point(
    store: CompletedCheckpointStore,
    first_id: int,
    savepoint_url: str,
    trust: Trust = UNCHECKED,
    *,
    accept_duplicates: bool = False,
) -> RestorePoint:
    """A relaunch of a run that began from savepoint `savepoint_url`: the newest intact
    checkpoint the run completed (numbered `first_id` or higher), else the savepoint
    again. The job's older checkpoints are another history and never restored."""
    point, failures = await _newest_intact(store, first_id, trust)
    if point is not None:
        await _refuse_behind(store, point, failures, min_id=first_id, accept=accept_duplicates)
        return point
    try:
        recorded = await _recorded_as(store, savepoint_url)
        savepoint = await asyncio.to_thread(verify, savepoint_url, trust, recorded)
    except SnapshotCorruptError as error:
        if not failures:
            raise
        raise NoUsableCheckpointError(
            store.keys, [*failures, f"savepoint {savepoint_url}: {error}"]
        ) from error
    # Everything the run completed is newer than the savepoint it began from.
    await _refuse_behind(
        store, savepoint, failures, min_id=first_id, restored_id=first_id - 1, accept=accept_duplicates
    )
    return savepoint


async def _named_savepoint(store: CompletedCheckpointStore, url: str, trust: Trust) -> RestorePoint:
    """The savepoint (or retained checkpoint) the user named: if the job took it, only
    the `_metadata` etcd recorded for it; otherwise (another job's, or one whose record
    is gone) by its signature alone, or vouched for. Output the job committed after it
    is written again: the user chose it, so that is said, not refused."""
    recorded = await _recorded_as(store, url)
    point = await asyncio.to_thread(verify, url, trust, recorded)
    newest = await _newest_completed(store, 0)
    if newest is None or (recorded is not None and recorded.checkpoint_id >= newest):
        return point
    if recorded is None:
        when = f"its output up to checkpoint {newest} is committed"
    else:
        when = f"checkpoint {newest} completed after it"
    log.warning(
        "restoring %s, named by --from-savepoint, although %s: what the job committed after the "
        "savepoint's point is written again (a sink cannot take back committed output)",
        url,
        when,
    )
    return point


async def _recorded_as(store: CompletedCheckpointStore, url: str) -> Recorded | None:
    """What etcd recorded of the snapshot at `url`: a completed checkpoint's or
    savepoint's summary, else a served savepoint request's result."""
    place = _place(url)
    for summary in await store.all():
        if _place(summary.path) == place:
            return Recorded(store.keys, summary.checkpoint_id, summary.metadata_sha256)
    for result in await store.savepoint_results():
        if result.status != "completed" or result.path is None or result.checkpoint_id is None:
            continue
        if _place(result.path) == place:
            return Recorded(store.keys, result.checkpoint_id, result.metadata_sha256)
    return None


def _place(url: str) -> str:
    """`url` as one spelling: `/a/b/`, `file:///a/b` and `file:///a//b` are one place."""
    storage = CheckpointStorage(url)
    return str(storage.fs.unstrip_protocol(storage.root))


async def _newest_completed(store: CompletedCheckpointStore, min_id: int) -> int | None:
    """The newest checkpoint or savepoint numbered `min_id` or higher that completed:
    the sinks committed the job's output up to its epoch."""
    ids = [c.checkpoint_id for c in await store.all()]
    ids.append(await store.latest_id() or 0)
    newest = max(ids)
    return newest if newest >= max(min_id, 1) else None


async def _refuse_behind(
    store: CompletedCheckpointStore,
    point: RestorePoint,
    failures: list[str],
    *,
    min_id: int = 0,
    restored_id: int | None = None,
    accept: bool,
) -> None:
    """Refuse to restore `point` when a checkpoint numbered `min_id` or higher and newer
    than it (than `restored_id`, for a point of another numbering) completed, unless
    the duplicates are accepted; then say how many epochs are written again."""
    restored = point.metadata.checkpoint_id if restored_id is None else restored_id
    newest = await _newest_completed(store, min_id)
    if newest is None or newest <= restored:
        return
    if not failures:  # `latest` names a checkpoint whose summary is gone
        failures = [f"checkpoint {newest}: completed, but etcd no longer holds its record"]
    if not accept:
        raise RestoreBehindCommittedOutputError(store.keys, point.name, newest, failures)
    log.warning(
        "restoring %s although checkpoint %s completed after it (%s): the output of up to %d "
        "epoch(s) the sinks committed after it is written again, as %s accepts",
        point.name,
        newest,
        "; ".join(failures),
        newest - restored,
        ACCEPT_DUPLICATES_OPTION,
    )


async def _newest_intact(
    store: CompletedCheckpointStore, min_id: int, trust: Trust
) -> tuple[RestorePoint | None, list[str]]:
    """The newest completed checkpoint numbered `min_id` or higher whose `_metadata` is
    the one etcd recorded and whose files all verify, and why each newer one was skipped."""
    marks = await store.unusable.all()
    failures: list[str] = []
    for summary in reversed([c for c in await store.all() if c.checkpoint_id >= min_id]):
        name = f"{summary.kind} {summary.checkpoint_id} ({summary.path})"
        mark = marks.get(summary.checkpoint_id)
        if mark is not None and mark.applies_to(summary.checkpoint_id, summary.path):
            reason = f"marked unusable: {mark.reason}"
        else:
            recorded = Recorded(store.keys, summary.checkpoint_id, summary.metadata_sha256)
            try:
                return await asyncio.to_thread(verify, summary.path, trust, recorded), failures
            except SnapshotCorruptError as error:
                reason = str(error)
                await store.unusable.mark(summary.checkpoint_id, summary.path, reason)
        log.error("skipping %s for restore: %s", name, reason)
        failures.append(f"{name}: {reason}")
    return None, failures
