"""What the driver's full check of a restore point costs, beside the restore itself.

Before every launch the driver reads each file of the checkpoint it is about to
restore and checks its CRC-32 (`coordination/restore_point.py: verify`), where
it used to check only sizes. Fills a RocksDB state of two subtasks (default
100,000 keys x 1,000 random bytes, ~100 MB), takes a native checkpoint and a
canonical savepoint of it into `file://` storage, and times: the old size check,
the full check with 1 and with 4 threads, with the files in the page cache
(warm: a restart soon after the checkpoint was written) and evicted from it
(cold: read from disk), and the restore of the same snapshot by both subtasks.

    .venv/bin/python bench/restore_verify.py [--keys N] [--value-bytes B] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.restore_point import verify
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex  # noqa: E402 - after the path that makes it importable

M = 128
P = 2
MB = 1024 * 1024
STATE = ValueStateDescriptor("payload")


def evict(paths: list[str]) -> None:
    """Drop the files' pages from the page cache, so the next read comes from disk."""
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def median_seconds(run: Callable[[], object], rounds: int, before: Callable[[], None]) -> float:
    times = []
    for _ in range(rounds):
        before()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def files_of(storage: CheckpointStorage, metadata: CheckpointMetadata) -> list[tuple[str, int]]:
    sizes = {}
    for vertex in metadata.vertices.values():
        for subtask in vertex.subtasks:
            for handle in (subtask.keyed, subtask.operator):
                for ref in handle.files() if handle is not None else ():
                    sizes[storage.resolve(storage.root, ref)] = ref.size
    return sorted(sizes.items())


def size_check(url: str) -> None:
    """What the driver did before: `_metadata`, then each file's size."""
    storage = CheckpointStorage(url)
    for path, size in files_of(storage, read_metadata(storage, storage.root)):
        storage.check_size(path, size)


def fill(backend: RocksDBKeyedStateBackend, keys: int, value_bytes: int) -> None:
    """Random (incompressible) values for the keys of `backend`'s key groups."""
    rng = random.Random(backend.key_groups.start)
    state = backend.state(STATE)
    for key in range(keys):
        if key_group(key, M) in backend.key_groups:
            backend.set_current_key(key)
            state.update(rng.randbytes(value_bytes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    storage = CheckpointStorage(f"file://{work}/checkpoints")

    backends = [
        RocksDBKeyedStateBackend(M, key_group_range(M, P, i), work / "local" / str(i), incremental=True)
        for i in range(P)
    ]
    for backend in backends:
        fill(backend, args.keys, args.value_bytes)
    subtasks = [LocalSubtask(b) for b in backends]
    dirs = {
        "native checkpoint": storage.checkpoint_dir("bench", 1),
        "canonical savepoint": storage.savepoint_dir("bench"),
    }
    snapshots = {
        "native checkpoint": snapshot_vertex(
            storage, dirs["native checkpoint"], ("bench", 1, "checkpoint"), "v", subtasks
        ),
        "canonical savepoint": snapshot_vertex(
            storage, dirs["canonical savepoint"], ("bench", 2, "savepoint"), "v", subtasks
        ),
    }
    for backend in backends:
        backend.close()

    print(f"{args.keys:,} keys x {args.value_bytes} B over {P} subtasks; median of {args.rounds}")
    for name, meta in snapshots.items():
        url = f"file://{dirs[name]}"
        paths = [path for path, _ in files_of(CheckpointStorage(url), verify(url).metadata)]
        megabytes = meta.state_bytes / MB
        print(f"\n{name}: {megabytes:,.0f} MB in {len(paths)} files")

        def warm() -> None:
            return None

        def cold(paths: list[str] = paths) -> None:
            evict(paths)

        rows: list[tuple[str, Callable[[], object]]] = [
            ("size check (before)", lambda url=url: size_check(url)),
            ("full CRC check, 1 thread", lambda url=url: verify(url, threads=1)),
            ("full CRC check, 4 threads", lambda url=url: verify(url, threads=4)),
        ]
        restored = 0

        def restore(directory: str = dirs[name]) -> None:
            nonlocal restored
            restored += 1
            targets = [
                RocksDBKeyedStateBackend(M, key_group_range(M, P, i), work / f"restore-{restored}" / str(i))
                for i in range(P)
            ]
            restore_vertex(storage, directory, "v", [LocalSubtask(t) for t in targets])
            for target in targets:
                target.close()

        rows.append(("restore, both subtasks (for scale)", restore))
        for label, run in rows:
            hot = median_seconds(run, args.rounds, warm)
            disk = median_seconds(run, args.rounds, cold)
            print(
                f"  {label:<36} warm {hot * 1000:>8,.1f} ms ({megabytes / hot:>6,.0f} MB/s)"
                f"   cold {disk * 1000:>8,.1f} ms ({megabytes / disk:>6,.0f} MB/s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
