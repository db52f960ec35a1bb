"""Fixtures shared by every test: state backends (heap and RocksDB) and storage."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import pytest_asyncio
from lockgate.runtime import AggregateFunction
from lockgate.runtime.backends.heap.backend import HeapKeyedStateBackend
from lockgate.runtime.backends.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.runtime.clock import Clock, ManualClock
from lockgate.runtime.snapshot.checkpointable import CheckpointableKeyedStateBackend
from lockgate.runtime.snapshot.storage import CheckpointStorage
from lockgate.runtime.spark import local_session

from tests.kafka_broker import KafkaBroker, kafka_broker
from tests.kube_emulator import RESTRICTED, add_namespace, emulated_api_server
from tests.operator.cluster_helpers import NAMESPACE

BACKENDS = ("heap", "rocksdb")


class Average(AggregateFunction[float, tuple[float, int], float]):
    """The aggregate function the state tests use."""

    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, accumulator: tuple[float, int]) -> tuple[float, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[float, int]) -> float:
        return accumulator[0] / accumulator[1]


BackendFactory = Callable[..., CheckpointableKeyedStateBackend]


def make_backend(
    kind: str,
    max_parallelism: int,
    key_groups: range,
    local_dir: Path,
    clock: Clock | None = None,
    incremental: bool = False,
) -> CheckpointableKeyedStateBackend:
    """`incremental` is RocksDB's: native incremental checkpoints (the heap's are canonical)."""
    if kind == "heap":
        return HeapKeyedStateBackend(max_parallelism, key_groups, clock)
    if kind == "rocksdb":
        return RocksDBKeyedStateBackend(
            max_parallelism, key_groups, local_dir, clock, incremental=incremental
        )
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
def new_backend(backend_kind: str, tmp_path: Path, clock: ManualClock) -> Iterator[BackendFactory]:
    """Makes backends of the parametrized kind; closes them at the end of the test."""
    made: list[CheckpointableKeyedStateBackend] = []

    def factory(
        max_parallelism: int = 128, key_groups: range | None = None
    ) -> CheckpointableKeyedStateBackend:
        groups = range(max_parallelism) if key_groups is None else key_groups
        backend = make_backend(backend_kind, max_parallelism, groups, tmp_path / "local", clock)
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()


@pytest.fixture
def backend(new_backend: BackendFactory) -> CheckpointableKeyedStateBackend:
    return new_backend()


@pytest.fixture
def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(f"file://{tmp_path}/checkpoints")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for the whole test session, with slots for P = 3 (more
    slots than this machine's cores: a barrier stage needs all P at once)."""
    session = local_session(3, "lockgate-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One Kafka-protocol broker (tansu) for the whole test session; tests make their own topics."""
    with kafka_broker(tmp_path_factory.mktemp("kafka") / "tansu.log") as broker:
        yield broker


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[kmock.KubernetesEmulator, str]]:
    """The emulated Kubernetes API server (the one stand-in) and its URL, with the
    tests' namespace, which enforces Pod Security "restricted" (the operator runs
    jobs only in such namespaces)."""
    async with emulated_api_server() as served:
        add_namespace(served[0], NAMESPACE, RESTRICTED)
        yield served
