"""Where a native RocksDB restore at a new parallelism spends its time: restores
each new subtask of one vertex of a completed checkpoint, one after the other,
and times the steps of `native_restore.restore_native` — downloading (read,
checksums, write) an old subtask's files, opening them, range-deleting the
foreign key groups, and copying the rows of a straddling range. The steps are
timed by wrapping the runtime's own functions in this process (they log no
times); nothing else changes.

    .venv/bin/python bench/restore_steps.py CHECKPOINT_STORAGE_URL CHECKPOINT_DIR VERTEX -p 3

e.g. a run of `rescale_downtime.py --keep`: file://<its dir>/.lockgate/checkpoints,
<its dir>/.lockgate/checkpoints/state/chk-N, blob. With `--local-recovery DIR`
(that run's `<its dir>/.lockgate/state/state/blob/local-recovery`, what its
subtasks left when they closed) the SST files come from there where they may
(`local_recovery.py`: linked, or linked and checked), as in an in-place rescale;
"download" is then that step.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lockgate.runtime.backends.rocksdb.native_restore as native_restore
from lockgate.runtime import key_group_range
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import restore_subtask

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.vertex_snapshots import LocalSubtask  # noqa: E402

steps: dict[str, float] = {}


def timed(step: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            steps[step] = steps.get(step, 0.0) + time.monotonic() - started

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("storage", help="the checkpoint storage's URL")
    parser.add_argument("checkpoint", help="the checkpoint's directory in it")
    parser.add_argument("vertex")
    parser.add_argument("-p", "--parallelism", type=int, required=True, help="the new parallelism")
    parser.add_argument("--local-recovery", type=Path, help="the local-recovery directory to restore from")
    arguments = parser.parse_args()
    native_restore._download = timed("download", native_restore._download)
    native_restore._copy_key_groups = timed("copy rows", native_restore._copy_key_groups)
    RocksDBKeyedStateBackend.replace_files = timed("open", RocksDBKeyedStateBackend.replace_files)
    RocksDBKeyedStateBackend.drop_foreign_key_groups = timed(
        "delete range", RocksDBKeyedStateBackend.drop_foreign_key_groups
    )
    storage = CheckpointStorage(arguments.storage)
    metadata = read_metadata(storage, arguments.checkpoint)
    vertex = metadata.vertices[arguments.vertex]
    p = arguments.parallelism
    print(f"{arguments.vertex} at {vertex.parallelism} -> {p}, max parallelism {vertex.max_parallelism}")
    local = Path(tempfile.mkdtemp(prefix="lockgate-restore-steps-"))
    try:
        for index in range(p):
            steps.clear()
            groups = key_group_range(vertex.max_parallelism, p, index)
            backend = RocksDBKeyedStateBackend(
                vertex.max_parallelism,
                groups,
                local / str(index),
                incremental=True,
                local_recovery=arguments.local_recovery,
            )
            subtask = LocalSubtask(backend)
            started = time.monotonic()
            restore_subtask(
                storage,
                arguments.checkpoint,
                metadata,
                vertex=arguments.vertex,
                parallelism=p,
                index=index,
                keyed=subtask.keyed,
                operator=subtask.operator,
            )
            took = time.monotonic() - started
            restored = backend.native_restore
            copied = None if restored is None else restored.rows_copied
            fetched = None if restored is None else dict(restored.fetched)
            parts = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in steps.items())
            print(
                f"subtask {index}: {took:.2f} s ({parts}); rows copied: {copied}; SST files: {fetched}",
                flush=True,
            )
            backend.close()
    finally:
        shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    main()
