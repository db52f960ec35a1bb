"""Snapshot and restore throughput at ~1 GB of keyed state, and incremental size.

Fills a RocksDB backend (default 1,000,000 keys x 1,000 random bytes), then
measures: canonical snapshot (synchronous and asynchronous parts), canonical
restore at the same and at another parallelism, native snapshot and restore,
the heap backend's canonical snapshot and restore, and the bytes a native
incremental checkpoint uploads after 1% of the keys changed.

    .venv/bin/python bench/snapshot_throughput.py [--keys N] [--value-bytes B]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from lockgate.runtime import ValueStateDescriptor, key_group_range
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, SnapshotKind, VertexState, write_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import SnapshotTarget, snapshot_subtask
from lockgate.runtime.state.backend import KeyedStateBackend

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.vertex_snapshots import LocalSubtask, restore_vertex  # noqa: E402 - after the path that makes it importable

M = 128
STATE = ValueStateDescriptor("payload")
T = TypeVar("T")
MB = 1024 * 1024


def timed(run: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = run()
    return result, time.perf_counter() - started


def fill(backend: KeyedStateBackend, keys: int, value_bytes: int) -> None:
    rng = random.Random(3)
    state = backend.state(STATE)
    for key in range(keys):
        backend.set_current_key(key)
        state.update(rng.randbytes(value_bytes))


def snapshot(
    storage: CheckpointStorage,
    backend: CheckpointableKeyedStateBackend,
    n: int,
    canonical: bool,
) -> tuple[CheckpointMetadata, float, float]:
    """`canonical`: in the canonical format, as a savepoint is (a checkpoint takes the
    backend's own: native for the RocksDB backend here)."""
    snapshot_dir = storage.checkpoint_dir("bench", n)
    target = SnapshotTarget(storage, snapshot_dir, "v", 0)
    kind: SnapshotKind = "savepoint" if canonical else "checkpoint"
    pending, sync = timed(lambda: snapshot_subtask(target, n, kind, backend, None))
    state, upload = timed(pending.complete)
    meta = CheckpointMetadata("bench", n, kind, 0, {"v": VertexState(1, M, (state,))})
    write_metadata(storage, snapshot_dir, meta, None)  # signing: one HMAC of a few KB
    if kind == "checkpoint":
        backend.notify_checkpoint_complete(n)
    return meta, sync, upload


def restore(
    storage: CheckpointStorage,
    n: int,
    make: Callable[[range], CheckpointableKeyedStateBackend],
    parallelism: int,
) -> float:
    backends = [make(key_group_range(M, parallelism, i)) for i in range(parallelism)]
    _, elapsed = timed(
        lambda: restore_vertex(
            storage, storage.checkpoint_dir("bench", n), "v", [LocalSubtask(b) for b in backends]
        )
    )
    for backend in backends:
        backend.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    rows: list[tuple[str, float, float]] = []

    def row(name: str, size: int, seconds: float) -> None:
        rows.append((name, size / MB, seconds))
        print(
            f"{name:<52} {size / MB:>8,.0f} MB {seconds:>7.2f} s {size / MB / seconds:>8,.0f} MB/s",
            flush=True,
        )

    rocks = RocksDBKeyedStateBackend(M, range(M), work / "local", incremental=True)
    _, seconds = timed(lambda: fill(rocks, args.keys, args.value_bytes))
    print(f"filled {args.keys:,} keys x {args.value_bytes} B in {seconds:.1f} s")

    meta, sync, upload = snapshot(storage, rocks, 1, canonical=True)
    size = meta.state_bytes
    print(f"canonical snapshot (rocksdb): synchronous part {sync * 1000:.0f} ms")
    row("canonical snapshot, rocksdb (async part)", size, upload)

    def rocksdb_restores(label: str, n: int, size: int) -> None:
        for parallelism in (1, 2):
            local = work / f"restore-{n}-{parallelism}"
            seconds = restore(storage, n, lambda g, d=local: RocksDBKeyedStateBackend(M, g, d), parallelism)
            row(f"{label}, P=1 -> P={parallelism} (all subtasks)", size, seconds)

    rocksdb_restores("canonical restore into rocksdb", 1, size)

    meta, sync, upload = snapshot(storage, rocks, 2, canonical=False)
    full = meta.state_bytes
    print(f"native snapshot: synchronous part {sync * 1000:.0f} ms")
    row("native snapshot, full (async upload)", full, upload)
    rocksdb_restores("native restore", 2, full)

    rng = random.Random(5)
    state = rocks.state(STATE)
    for key in rng.sample(range(args.keys), args.keys // 100):
        rocks.set_current_key(key)
        state.update(rng.randbytes(args.value_bytes))
    before = {ref.path for ref in meta.vertices["v"].subtasks[0].keyed.files()}  # type: ignore[union-attr]
    meta3, sync, upload = snapshot(storage, rocks, 3, canonical=False)
    handle = meta3.vertices["v"].subtasks[0].keyed
    assert handle is not None
    uploaded = sum(ref.size for ref in handle.files() if ref.path not in before)
    print(
        f"incremental after 1% of keys changed: uploaded {uploaded / MB:,.1f} MB of "
        f"{meta3.state_bytes / MB:,.0f} MB referenced = {uploaded / full:.1%} of a full snapshot "
        f"(target <= 10%); sync {sync * 1000:.0f} ms, upload {upload:.2f} s"
    )
    rocks.close()
    shutil.rmtree(work / "local", ignore_errors=True)

    heap = HeapKeyedStateBackend(M, range(M))
    fill(heap, args.keys, args.value_bytes)
    meta, sync, upload = snapshot(storage, heap, 4, canonical=False)
    print(f"canonical snapshot (heap): synchronous part {sync * 1000:.0f} ms")
    row("canonical snapshot, heap (async part)", meta.state_bytes, upload)
    row(
        "canonical restore into heap, P=1",
        meta.state_bytes,
        restore(storage, 4, lambda g: HeapKeyedStateBackend(M, g), 1),
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
