"""Incremental TTL cleanup: what it costs a checkpoint, and what it saves.

1. Cost: `drop_expired(budget)` over 200,000 stored TTL entries, all live
   (examined and kept) or all expired (examined and deleted), per backend.
2. Effect: sessions that nobody reads again. Each simulated second writes
   K new session keys (2,000, then 20,000) with a 10 s TTL into a RocksDB
   backend and takes a native incremental checkpoint (through
   `snapshot_vertex`, which runs the cleanup first). After 60 seconds, reports the rows stored,
   the bytes the last checkpoint references and the checkpoint time, with the
   cleanup and without it (how the backend behaved before it).

    .venv/bin/python bench/ttl_cleanup.py [--seconds S] [--keys-per-second K ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lockgate.runtime import ValueStateDescriptor
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.clock import ManualClock
from lockgate.runtime.snapshot.handles import NativeKeyedHandle
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.state.backend import KeyedStateBackend
from lockgate.runtime.state.ttl_cleanup import IncrementalCleanup

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.vertex_snapshots import LocalSubtask, snapshot_vertex  # noqa: E402 - after the path that makes it importable

M = 128
SESSION = ValueStateDescriptor("session", ttl=10)
MB = 1024 * 1024


def _fill(backend: KeyedStateBackend, keys: range) -> None:
    session = backend.state(SESSION)
    for key in keys:
        backend.set_current_key(key)
        session.update(f"session-{key}")


def call_cost(kind: str, work: Path, entries: int, budget: int) -> tuple[float, float]:
    """Milliseconds per call of `budget` entries: all live, then all expired."""
    clock = ManualClock(start_ms=1_000_000)
    backend: KeyedStateBackend
    if kind == "rocksdb":
        backend = RocksDBKeyedStateBackend(M, range(M), work / kind, clock)
    else:
        backend = HeapKeyedStateBackend(M, range(M), clock)
    _fill(backend, range(entries))
    calls = entries // budget
    started = time.perf_counter()
    for _ in range(calls):
        backend.drop_expired(budget)
    live = (time.perf_counter() - started) / calls
    clock.advance(20_000)
    started = time.perf_counter()
    dropped = sum(backend.drop_expired(budget) for _ in range(calls))
    expired = (time.perf_counter() - started) / calls
    assert dropped == entries, f"{dropped} of {entries} expired entries dropped"
    backend.close()
    return live * 1000, expired * 1000


def churn(work: Path, seconds: int, per_second: int, cleanup: bool) -> dict[str, float]:
    clock = ManualClock(start_ms=1_000_000)
    backend = RocksDBKeyedStateBackend(M, range(M), work / "db", clock, incremental=True)
    backend.state(SESSION)
    if not cleanup:
        backend._ttl_cleanup = IncrementalCleanup()  # without the state's sweep: expired rows stay
    subtask = LocalSubtask(backend)
    storage = CheckpointStorage(f"file://{work}/checkpoints")
    durations = []
    for second in range(seconds):
        _fill(backend, range(second * per_second, (second + 1) * per_second))
        clock.advance(1_000)
        started = time.perf_counter()
        n = second + 1
        directory = storage.checkpoint_dir("job", n)
        meta = snapshot_vertex(storage, directory, ("job", n, "checkpoint"), "v", [subtask])
        durations.append(time.perf_counter() - started)
    handle = meta.vertices["v"].subtasks[0].keyed
    assert isinstance(handle, NativeKeyedHandle)
    rows = sum(1 for _ in backend.column_family("session").keys())  # noqa: SIM118 - an Rdict
    backend.close()
    return {
        "rows": rows,
        "checkpoint_mb": sum(ref.size for ref in handle.files()) / MB,
        "mean_ms": statistics.mean(durations) * 1000,
        "max_ms": max(durations) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--keys-per-second", type=int, nargs="+", default=[2_000, 20_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockgate-ttl-") as temp:
        work = Path(temp)
        print("| backend | 10,000 live entries | 10,000 expired entries |")
        print("|---|---:|---:|")
        for kind in ("heap", "rocksdb"):
            live, expired = call_cost(kind, work, 200_000, 10_000)
            print(f"| {kind} | {live:.1f} ms | {expired:.1f} ms |")
        print()
        print("| new keys/s | live at the end | cleanup | rows | last checkpoint | checkpoint mean / max |")
        print("|---:|---:|---|---:|---:|---:|")
        for rate in args.keys_per_second:
            # Written in the last 9 s: the keys of 10 s ago expire on the last tick.
            live = (SESSION.ttl_ms // 1000 - 1) * rate  # type: ignore[operator]
            for cleanup in (False, True):
                result = churn(work / f"{rate}-{cleanup}", args.seconds, rate, cleanup)
                print(
                    f"| {rate:,} | {live:,} | {'on' if cleanup else 'off'} | {result['rows']:,.0f} "
                    f"| {result['checkpoint_mb']:.1f} MB "
                    f"| {result['mean_ms']:.0f} / {result['max_ms']:.0f} ms |"
                )


if __name__ == "__main__":
    main()
