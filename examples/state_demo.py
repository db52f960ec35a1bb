"""Demo: keyed state survives a snapshot and a restore at another parallelism.

A word count keeps its counts in keyed state, spread over key groups. It runs
at parallelism 2 on RocksDB, takes an incremental checkpoint and a savepoint,
then resumes from each at parallelism 3 (from the savepoint on the heap
backend) and finishes the input. The counts must equal a plain Counter's.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range, operator_index
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import KeyedStateBackend

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.vertex_snapshots import LocalSubtask, restore_vertex, snapshot_vertex  # noqa: E402 - after the path that makes it importable

MAX_PARALLELISM = 128
COUNT = ValueStateDescriptor("count", default=0)


def words(n: int) -> list[str]:
    rng = random.Random(7)
    vocabulary = [f"word{i}" for i in range(5000)]
    return [rng.choice(vocabulary) for _ in range(n)]


def count(subtasks: list[LocalSubtask], stream: list[str]) -> None:
    parallelism = len(subtasks)
    for word in stream:
        index = operator_index(key_group(word, MAX_PARALLELISM), MAX_PARALLELISM, parallelism)
        backend = subtasks[index].keyed
        assert backend is not None
        backend.set_current_key(word)
        state = backend.state(COUNT)
        state.update(state.value() + 1)


def rocksdb_subtasks(parallelism: int, local: Path) -> list[LocalSubtask]:
    subtasks = []
    for i in range(parallelism):
        groups = key_group_range(MAX_PARALLELISM, parallelism, i)
        subtasks.append(
            LocalSubtask(RocksDBKeyedStateBackend(MAX_PARALLELISM, groups, local, incremental=True))
        )
    return subtasks


def heap_subtasks(parallelism: int) -> list[LocalSubtask]:
    return [
        LocalSubtask(HeapKeyedStateBackend(MAX_PARALLELISM, key_group_range(MAX_PARALLELISM, parallelism, i)))
        for i in range(parallelism)
    ]


def check(subtasks: list[LocalSubtask], expected: Counter[str], label: str) -> bool:
    wrong = 0
    for word, n in expected.items():
        backend = subtasks[
            operator_index(key_group(word, MAX_PARALLELISM), MAX_PARALLELISM, len(subtasks))
        ].keyed
        assert isinstance(backend, KeyedStateBackend)
        backend.set_current_key(word)
        wrong += backend.state(COUNT).value() != n
    verdict = "OK" if wrong == 0 else f"FAILED ({wrong} wrong counts)"
    print(f"  {label}: {len(expected)} words checked against a plain Counter: {verdict}")
    return wrong == 0


def describe(subtasks: list[LocalSubtask], kind: str) -> None:
    for i, subtask in enumerate(subtasks):
        assert subtask.keyed is not None
        groups = subtask.keyed.key_groups
        print(f"    subtask {i} ({kind}): key groups {groups.start:3d}..{groups.stop - 1:3d}")


def main() -> int:
    stream = words(300_000)
    first, second = stream[:150_000], stream[150_000:]
    work = Path(tempfile.mkdtemp(prefix="lockgate-demo-"))
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    print(f"Lockgate state demo — {len(stream):,} words, max parallelism {MAX_PARALLELISM}")
    print(f"  checkpoint storage: {storage.url}\n")

    print("1. Count the first half at parallelism 2 on RocksDB")
    old = rocksdb_subtasks(2, work / "p2")
    describe(old, "rocksdb")
    started = time.perf_counter()
    count(old, first)
    print(f"    {len(first):,} records in {time.perf_counter() - started:.2f} s")

    print("\n2. Snapshot: an incremental checkpoint and a canonical savepoint")
    started = time.perf_counter()
    chk = snapshot_vertex(storage, storage.checkpoint_dir("demo", 1), ("demo", 1, "checkpoint"), "count", old)
    elapsed = time.perf_counter() - started
    print(f"    checkpoint 1 (native RocksDB): {chk.state_bytes:,} bytes, {elapsed:.2f} s")
    started = time.perf_counter()
    sp = snapshot_vertex(storage, storage.savepoint_dir("demo-1"), ("demo", 1, "savepoint"), "count", old)
    elapsed = time.perf_counter() - started
    print(f"    savepoint (canonical):         {sp.state_bytes:,} bytes, {elapsed:.2f} s")
    for subtask in old:
        assert subtask.keyed is not None
        subtask.keyed.close()
    print("    the parallelism-2 job is gone; only the snapshots remain")

    expected = Counter(stream)
    ok = True
    print("\n3. Resume at parallelism 3 from the checkpoint (RocksDB) and finish the input")
    from_checkpoint = rocksdb_subtasks(3, work / "p3")
    restore_vertex(storage, storage.checkpoint_dir("demo", 1), "count", from_checkpoint)
    describe(from_checkpoint, "rocksdb")
    count(from_checkpoint, second)
    ok &= check(from_checkpoint, expected, "from checkpoint")

    print("\n4. Resume at parallelism 3 from the savepoint on the heap backend")
    from_savepoint = heap_subtasks(3)
    restore_vertex(storage, storage.savepoint_dir("demo-1"), "count", from_savepoint)
    describe(from_savepoint, "heap")
    count(from_savepoint, second)
    ok &= check(from_savepoint, expected, "from savepoint")

    print("\n" + ("Every count survived the snapshot and the rescale." if ok else "MISMATCH"))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
