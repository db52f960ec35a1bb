"""ValueState read-modify-write: heap and RocksDB backends against raw rocksdict.

100,000 keys, 2,000,000 updates (`count.update(count.value() + 1)` after
`set_current_key`). The raw baselines do the same get+put on the same row
keys with rocksdict directly: raw mode with the same write options and pickle
(what the backend does underneath), and rocksdict's default mode.

    .venv/bin/python bench/state_rw.py [--updates N] [--keys K]
"""

from __future__ import annotations

import argparse
import pickle
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import rocksdict
from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.backends.rocksdb.database import db_options
from lockgate.runtime.key_serializer import serialize_key
from lockgate.runtime.keygroups import key_group_of_bytes

M = 128


def workload(keys: int, updates: int) -> list[str]:
    rng = random.Random(1)
    names = [f"user-{i}" for i in range(keys)]
    return [names[rng.randrange(keys)] for _ in range(updates)]


def backend_run(backend: HeapKeyedStateBackend | RocksDBKeyedStateBackend, stream: list[str]) -> float:
    count = backend.state(ValueStateDescriptor("count", default=0))
    set_key = backend.set_current_key
    started = time.perf_counter()
    for key in stream:
        set_key(key)
        count.update(count.value() + 1)
    return time.perf_counter() - started


def raw_run(directory: Path, stream: list[str]) -> float:
    """rocksdict in raw mode, WAL off, pickle values: the backend's own primitives."""
    db = rocksdict.Rdict(str(directory), db_options())
    options = rocksdict.WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign, assignment]
    db.create_column_family("count", rocksdict.Options(raw_mode=True))
    cf = db.get_column_family("count")
    cf.set_write_options(options)
    rows = {}
    for key in set(stream):
        key_bytes = serialize_key(key)
        rows[key] = key_group_of_bytes(key_bytes, M).to_bytes(2, "big") + key_bytes
    get, put, dumps, loads = cf.get, cf.put, pickle.dumps, pickle.loads
    started = time.perf_counter()
    for key in stream:
        row = rows[key]
        data = get(row)
        put(row, dumps((0 if data is None else loads(data)) + 1))
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def raw_default_mode_run(directory: Path, stream: list[str]) -> float:
    """rocksdict as its README shows it: default mode, string keys, default options."""
    db = rocksdict.Rdict(str(directory))
    started = time.perf_counter()
    for key in stream:
        db[key] = db.get(key, 0) + 1
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


def check(backend: HeapKeyedStateBackend | RocksDBKeyedStateBackend, stream: list[str]) -> None:
    expected: dict[str, int] = {}
    for key in stream:
        expected[key] = expected.get(key, 0) + 1
    count = backend.state(ValueStateDescriptor("count", default=0))
    for key in list(expected)[:1000]:
        backend.set_current_key(key)
        assert count.value() == expected[key], key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=2_000_000)
    args = parser.parse_args()
    stream = workload(args.keys, args.updates)
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))

    results: list[tuple[str, float]] = []

    def record(name: str, run: Callable[[], float]) -> None:
        elapsed = run()
        results.append((name, args.updates / elapsed))
        print(f"{name:<44} {args.updates / elapsed:>12,.0f} updates/s ({elapsed:.2f} s)", flush=True)

    heap = HeapKeyedStateBackend(M, range(M))
    record("heap backend", lambda: backend_run(heap, stream))
    check(heap, stream)
    rocks = RocksDBKeyedStateBackend(M, range(M), work / "backend")
    record("rocksdb backend", lambda: backend_run(rocks, stream))
    check(rocks, stream)
    record("raw rocksdict (raw mode, WAL off, pickle)", lambda: raw_run(work / "raw", stream))
    record("raw rocksdict (default mode)", lambda: raw_default_mode_run(work / "default", stream))

    rate = dict(results)
    ratio = rate["rocksdb backend"] / rate["raw rocksdict (raw mode, WAL off, pickle)"]
    print(f"\nrocksdb backend / raw rocksdict (same primitives): {ratio:.0%} (target >= 50%)")
    print(
        f"rocksdb backend / raw rocksdict (default mode):   "
        f"{rate['rocksdb backend'] / rate['raw rocksdict (default mode)']:.0%}"
    )


if __name__ == "__main__":
    main()
