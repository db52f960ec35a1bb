"""The soak's input and its exact reference: what the committed output and the
latest checkpoint's state must be.

Record n has key n % keys and goes to input partition key % partitions, so all of
a key's records are in one partition in increasing n: the running sum the job
emits for record n is determined, sum(k, k + keys, ..., n) for k = n % keys."""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any

import fsspec
from lockgate.runtime import ValueStateDescriptor, read_committed
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.snapshot.subtask import restore_subtask
from lockgate.runtime.state.operator_state import OperatorStateStore

from tests.faults.checkpoint_corruption import on_local_disk

TOTAL = ValueStateDescriptor("total", default=0)
SOURCE_VERTEX, SUM_VERTEX = "numbers", "sum"


def running_sum(n: int, keys: int) -> int:
    """The sum of every n' <= n with n' % keys == n % keys."""
    key = n % keys
    m = (n - key) // keys + 1
    return m * key + keys * m * (m - 1) // 2


class SoakInput:
    """A LogSource directory of `partitions` append-only files, and what was appended."""

    def __init__(self, directory: str, keys: int, partitions: int) -> None:
        self.directory = directory
        self.keys = keys
        self.partitions = partitions
        self.total = 0
        self._numbers: list[list[int]] = [[] for _ in range(partitions)]  # n's of each partition, in order

    def partition_name(self, p: int) -> str:
        return f"part-{p:03d}.jsonl"

    def append(self, count: int) -> None:
        lines: list[list[str]] = [[] for _ in range(self.partitions)]
        for n in range(self.total, self.total + count):
            p = (n % self.keys) % self.partitions
            lines[p].append(json.dumps({"n": n, "key": n % self.keys}) + "\n")
            self._numbers[p].append(n)
        for p, chunk in enumerate(lines):
            if chunk:
                with open(f"{self.directory}/{self.partition_name(p)}", "a") as stream:
                    stream.write("".join(chunk))
        self.total += count

    def expected_state(self, lines_read: dict[str, int]) -> dict[int, int]:
        """Each key's total after the first `lines_read[partition]` lines of each partition."""
        totals = dict.fromkeys(range(self.keys), 0)
        for p in range(self.partitions):
            for n in self._numbers[p][: lines_read.get(self.partition_name(p), 0)]:
                totals[n % self.keys] += n
        return totals


def output_problems(
    records: list[dict[str, Any]],
    total: int,
    keys: int,
    complete: bool = True,
    replayed: frozenset[int] = frozenset(),
) -> list[str]:
    """What is wrong with the committed output of the first `total` records, if
    anything; `complete` False: records not committed yet are no problem.
    `replayed`: records that a checkpoint found damaged had committed; a restore of
    the one before it writes them again, so each may stand exactly twice."""
    seen = Counter(int(r["n"]) for r in records)
    missing = [n for n in range(total) if n not in seen] if complete else []
    duplicated = sorted(n for n, times in seen.items() if times > (2 if n in replayed else 1))
    unknown = sorted(n for n in seen if not 0 <= n < total)
    wrong = sorted(
        int(r["n"])
        for r in records
        if r["key"] != int(r["n"]) % keys or r["sum"] != running_sum(int(r["n"]), keys)
    )
    problems = []
    for name, numbers in (
        ("missing", missing),
        ("committed more than once", duplicated),
        ("never appended", unknown),
        ("with a wrong key or sum", wrong),
    ):
        if numbers:
            problems.append(f"{len(numbers)} record(s) {name}, e.g. n = {numbers[:8]}")
    return problems


def committed_by(output_url: str, checkpoints: set[int]) -> frozenset[int]:
    """The records in the sink's files committed by `checkpoints` (a committed
    file's name ends in `-chk<id>.jsonl`)."""
    fs, root = fsspec.core.url_to_fs(on_local_disk(output_url))
    numbers: set[int] = set()
    for path in fs.glob(f"{root.rstrip('/')}/*-chk*.jsonl"):
        match = _COMMITTED_BY.search(path)
        if match is not None and int(match.group(1)) in checkpoints:
            with fs.open(path, "rb") as lines:
                numbers.update(int(json.loads(line)["n"]) for line in lines if line.strip())
    return frozenset(numbers)


_COMMITTED_BY = re.compile(r"-chk(\d+)\.jsonl$")


def committed(output_url: str) -> list[dict[str, Any]]:
    try:
        return read_committed(on_local_disk(output_url))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class CheckpointState:
    checkpoint_id: int
    lines_read: dict[str, int]  # input partition -> lines the sources had read
    totals: dict[int, int]  # key -> its running total


def read_checkpoint_state(url: str, keys: int) -> CheckpointState:
    """The sources' offsets and every key's total in the snapshot at `url`, restored
    as a new task would restore them (every file's checksum verified)."""
    storage = CheckpointStorage(on_local_disk(url))
    metadata = read_metadata(storage, storage.root)
    offsets = OperatorStateStore()
    restore_subtask(
        storage,
        storage.root,
        metadata,
        vertex=SOURCE_VERTEX,
        parallelism=1,
        index=0,
        keyed=None,
        operator=offsets,
    )
    lines = {str(name): int(offset["line"]) for name, offset in offsets.union_list_state("offsets").get()}
    max_parallelism = metadata.vertices[SUM_VERTEX].max_parallelism
    with tempfile.TemporaryDirectory(prefix="soak-state-") as local:
        backend = RocksDBKeyedStateBackend(max_parallelism, range(max_parallelism), local)
        try:
            restore_subtask(
                storage,
                storage.root,
                metadata,
                vertex=SUM_VERTEX,
                parallelism=1,
                index=0,
                keyed=backend,
                operator=None,
            )
            totals = {}
            for key in range(keys):
                backend.set_current_key(key)
                totals[key] = int(backend.state(TOTAL).value())
        finally:
            backend.close()
    return CheckpointState(metadata.checkpoint_id, lines, totals)


def state_problems(state: CheckpointState, soak_input: SoakInput) -> list[str]:
    expected = soak_input.expected_state(state.lines_read)
    wrong = {k: (v, expected[k]) for k, v in state.totals.items() if v != expected[k]}
    if not wrong:
        return []
    sample = ", ".join(f"key {k}: {got} (expected {want})" for k, (got, want) in list(wrong.items())[:5])
    return [f"checkpoint {state.checkpoint_id}: {len(wrong)} key(s) with a wrong total: {sample}"]
