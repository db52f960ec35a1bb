"""The soak's schedule and the injectors that need no Spark: each does what it says,
on real files and real sockets."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import Producer
from lockgate.runtime import ValueStateDescriptor, key_group, key_group_range
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.coordination.restore_point import verify
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError

from tests.faults.checkpoint_corruption import corrupt_snapshot, files_only_it_holds, snapshot_files
from tests.faults.exchange_partition import PROXY_HOST, ExchangeProxies
from tests.faults.injectors import FaultContext, Injection, _between_kafka_transactions
from tests.faults.schedule import CLASS_OF, CLASSES, KINDS, Fault, Schedule, plan
from tests.faults.soak_reference import SoakInput, output_problems, running_sum
from tests.kafka_broker import QUIET, KafkaBroker
from tests.process_tree import ancestor_in, listening_on
from tests.vertex_snapshots import LocalSubtask, snapshot_vertex

# -- the schedule ------------------------------------------------------------------


def test_a_seed_plans_the_same_schedule_and_it_round_trips(tmp_path: Path) -> None:
    first, second = plan(14, 10, 4, 8.0), plan(14, 10, 4, 8.0)
    assert first == second
    assert plan(15, 10, 4, 8.0) != first
    first.save(tmp_path / "schedule.json")
    assert Schedule.load(tmp_path / "schedule.json") == first


def test_the_long_soak_gives_every_class_at_least_20_faults() -> None:
    schedule = plan(14, 50, 4, 8.0)
    faults = [f for faults in schedule.rounds for f in faults]
    assert len(faults) == 200
    per_class = Counter(f.cls for f in faults)
    assert min(per_class[c] for c in CLASSES) >= 20, per_class
    per_kind = Counter(f.kind for f in faults)
    for cls, kinds in KINDS.items():
        counts = [per_kind[k] for k in kinds]
        assert max(counts) - min(counts) <= 1, f"{cls}: kinds spread evenly"
    for faults_of_round in schedule.rounds:
        assert len({f.cls for f in faults_of_round}) == len(faults_of_round), "distinct classes per round"
        assert all(0 < f.at_s < 8.0 for f in faults_of_round)


def test_classes_and_kinds_narrow_the_schedule() -> None:
    schedule = plan(1, 3, 2, 6.0, classes=("etcd", "checkpoint"), kinds=("etcd-kill", "checkpoint-flip"))
    kinds = {f.kind for faults in schedule.rounds for f in faults}
    assert kinds == {"etcd-kill", "checkpoint-flip"}
    with pytest.raises(ValueError, match="unknown fault classes"):
        plan(1, 1, 1, 6.0, classes=("disk",))
    assert set(CLASS_OF.values()) == set(CLASSES)


# -- the reference ------------------------------------------------------------------


def test_the_reference_is_exact(tmp_path: Path) -> None:
    soak_input = SoakInput(str(tmp_path), keys=5, partitions=2)
    soak_input.append(40)
    good = [{"key": n % 5, "n": n, "sum": running_sum(n, 5)} for n in range(40)]
    assert output_problems(good, 40, 5) == []
    assert running_sum(37, 5) == sum(range(2, 38, 5))
    duplicated = [*good, good[3]]
    assert output_problems(duplicated, 40, 5) == ["1 record(s) committed more than once, e.g. n = [3]"]
    wrong = [dict(r, sum=r["sum"] + 1) if r["n"] == 7 else r for r in good]
    assert output_problems(wrong, 40, 5) == ["1 record(s) with a wrong key or sum, e.g. n = [7]"]
    assert output_problems(good[:-1], 40, 5) == ["1 record(s) missing, e.g. n = [39]"]
    assert output_problems(good[:-1], 40, 5, complete=False) == []
    lines = {soak_input.partition_name(0): 4, soak_input.partition_name(1): 0}
    # Partition 0 holds keys 0, 2, 4; its first 4 lines are n = 0, 2, 4, 5.
    assert soak_input.expected_state(lines) == {0: 5, 1: 0, 2: 2, 3: 0, 4: 4}


# -- checkpoint corruption --------------------------------------------------------------

COUNT = ValueStateDescriptor("count", default=0)


@pytest.fixture
def snapshot(tmp_path: Path) -> str:
    """A complete canonical snapshot of two subtasks holding 50 keys."""
    storage = CheckpointStorage(f"file://{tmp_path}/chk-1")
    subtasks = []
    for index in range(2):
        backend = HeapKeyedStateBackend(16, key_group_range(16, 2, index))
        subtasks.append(LocalSubtask(backend))
    for key in range(50):
        for subtask in subtasks:
            assert subtask.keyed is not None
            if subtask.keyed.key_groups.start <= _group(key) < subtask.keyed.key_groups.stop:
                subtask.keyed.set_current_key(key)
                subtask.keyed.state(COUNT).update(key)
    snapshot_vertex(storage, storage.root, ("job", 1, "checkpoint"), "count", subtasks)
    return storage.url


def _group(key: int) -> int:
    return key_group(key, 16)


def test_a_flipped_byte_keeps_the_size_and_fails_the_checksum(snapshot: str) -> None:
    sizes = {path: os.path.getsize(path) for path in snapshot_files(snapshot)}
    corrupted = corrupt_snapshot(f"faulty://{snapshot.removeprefix('file://')}", "flip", random.Random(3))
    assert {path: os.path.getsize(path) for path in sizes} == sizes, "same size: only a checksum notices"
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch"):
        verify(snapshot)  # the driver's check reads every file whole
    storage = CheckpointStorage(snapshot)
    refs = {
        storage.resolve(storage.root, ref): ref
        for vertex in read_metadata(storage, storage.root).vertices.values()
        for subtask in vertex.subtasks
        if subtask.keyed is not None
        for ref in subtask.keyed.files()
    }
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch"):
        storage.read_file(storage.root, refs[corrupted.path])


def test_a_truncated_file_fails_verification(snapshot: str) -> None:
    corrupted = corrupt_snapshot(snapshot, "truncate", random.Random(5))
    with pytest.raises(SnapshotCorruptError, match="truncated"):
        verify(snapshot)
    assert corrupted.describe().endswith(f"truncated to {corrupted.offset} bytes")


# -- the exchange partition ------------------------------------------------------------------


@pytest.fixture
def echo_server() -> Iterator[int]:
    """An echo server on 127.0.0.1, in this process (which plays the task worker)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1024):
            conn.sendall(data)


def _connect_when_proxied(port: int, timeout_s: float = 10.0) -> socket.socket:
    """As a task connects to a peer: refused connections retried until the proxy listens."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((PROXY_HOST, port), timeout=1)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the runtime's own retry interval stands here


def test_the_proxy_forwards_then_blackholes_then_heals(echo_server: int) -> None:
    proxies = ExchangeProxies(lambda: [os.getpid()])
    try:
        client = _connect_when_proxied(echo_server)
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"
        assert proxies.blackhole() == 1
        client.sendall(b"lost?")
        client.settimeout(1.0)
        with pytest.raises(TimeoutError):
            client.recv(5)  # a silent peer: nothing comes back, nothing is closed
        proxies.heal()
        client.settimeout(10)
        assert client.recv(5) == b"lost?", "held, not dropped: TCP retransmits once the partition heals"
        client.close()
    finally:
        proxies.close()


def test_corruption_spares_files_an_earlier_checkpoint_shares(tmp_path: Path) -> None:
    """Incremental checkpoints 1 and 2 share SST files; damaging checkpoint 2 must
    leave checkpoint 1 whole, or the fallback the soak checks has nothing to use."""
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    backend = RocksDBKeyedStateBackend(8, range(8), tmp_path / "db", incremental=True)
    subtask = LocalSubtask(backend)
    urls = []
    for n, keys in ((1, range(5_000)), (2, range(100))):
        for key in keys:
            backend.set_current_key(key)
            backend.state(COUNT).update(n)
        snapshot_dir = storage.checkpoint_dir("job", n)
        snapshot_vertex(storage, snapshot_dir, ("job", n, "checkpoint"), "v", [subtask])
        urls.append(f"file://{snapshot_dir.removeprefix('file://')}")
    first, second = urls
    shared = set(snapshot_files(first)) & set(snapshot_files(second))
    assert shared, "the second checkpoint reuses the first one's SST files"
    own = files_only_it_holds(second)
    assert own
    assert not shared & set(own)
    for seed in range(10):
        corrupted = corrupt_snapshot(second, "flip", random.Random(seed))
        assert corrupted.path in own
    verify(first)  # untouched: the one a fallback restores
    with pytest.raises(SnapshotCorruptError):
        verify(second)


# -- a relaunch's task by its exchange port ------------------------------------------


def test_the_process_listening_on_a_tasks_exchange_port_is_found_and_its_ancestor_named() -> None:
    """A fault at a rescale's `relaunched` step kills the task that published an
    exchange address under the relaunch: the process listening on that port."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys; s = socket.socket(); s.bind(('127.0.0.2', 0)); s.listen();"
            "print(s.getsockname()[1], flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert listening_on(port) == child.pid
        assert ancestor_in(child.pid, {os.getpid()}) == os.getpid(), "the test's process is its parent"
        assert ancestor_in(child.pid, {1_000_000_000}) is None
    finally:
        child.kill()
        child.wait()
    assert listening_on(port) is None, "nothing listens once it is gone"


def test_with_a_kafka_sink_a_fault_waits_until_no_transaction_is_open(kafka: KafkaBroker) -> None:
    """Killed mid-commit, a worker's transaction is aborted by the restore, and tansu
    shows aborted records: the soak injects its process faults between transactions."""
    topic = kafka.create_topic(1)
    cluster = SimpleNamespace(kafka=kafka, kafka_topic=topic, current=SimpleNamespace(spark=_NoWorkers()))
    ctx = FaultContext(cast(Any, cluster), cast(Any, None), 1.0)
    injection = Injection(Fault("worker-kill", 1.0, 0.0, 0))
    commit = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": topic, **QUIET})
    commit.init_transactions(30)
    commit.begin_transaction()
    commit.produce(topic, b"in an open transaction", partition=0)
    assert commit.flush(30) == 0
    committed_at: list[float] = []
    injected_at: list[float] = []

    def end_the_transaction_soon() -> None:
        threading.Event().wait(0.5)  # the transaction stays open this long
        committed_at.append(time.monotonic())
        commit.commit_transaction(30)

    ender = threading.Thread(target=end_the_transaction_soon)
    ender.start()

    def fault() -> bool:
        injected_at.append(time.monotonic())
        return True

    assert _between_kafka_transactions(ctx, injection, fault)
    ender.join()
    assert injected_at[0] > committed_at[0], "the fault was injected while the transaction was open"
    assert "a Kafka transaction was open at" in injection.detail


class _NoWorkers:
    def task_workers(self) -> list[int]:
        return []
