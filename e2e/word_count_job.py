"""One StreamingJob of the scenarios: `examples.wordcount` reading a log the test
appends to, with what a user watches — its status, its driver pod, its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockgate.operator.naming import JobNames
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_status import read_status
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import JobStatus
from lockgate.runtime.snapshot.metadata import CheckpointMetadata, read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage

from e2e.kubectl import Kubectl
from e2e.platform import Platform
from e2e.words import WordLog, committed, difference
from tests.polling import eventually_true
from tests.s3_server import S3Endpoint

STARTS_WITHIN_S = 180  # a driver's spark-submit, JVM and job start, on a loaded CI machine


@dataclass
class WordCountJob:
    platform: Platform
    kubectl: Kubectl
    name: str

    s3: S3Endpoint | None = None
    """Where checkpoints and output go: this S3 endpoint's bucket, or (None) the
    shared directory. The credentials reach the pods only through a Secret."""

    def __post_init__(self) -> None:
        root = self.platform.shared / self.name
        self.words = WordLog(root / "in")
        if self.s3 is None:
            self.output = f"file://{root}/out"
            self.checkpoints = f"file://{self.platform.shared}/checkpoints"
        else:
            self.output = f"s3://{self.s3.bucket}/{self.name}/out"
            self.checkpoints = f"s3://{self.s3.bucket}/checkpoints"
        self.names = JobNames(self.platform.namespace, self.name)
        self.keys = JobKeys(self.platform.namespace, self.name)

    def spec(self, replicas: int = 2) -> dict[str, Any]:
        spec = {
            "job": {
                "entrypoint": "examples.wordcount:build",
                "args": {"input": self.words.url, "output": self.output},
            },
            "replicas": replicas,
            "maxParallelism": 64,
            "checkpointing": {"interval": "1s", "storage": self.checkpoints},
            "restartStrategy": {"type": "fixed-delay", "attempts": 3, "delay": "1s"},
        }
        if self.s3 is not None:  # as examples/sums.yaml gives its Secret to driver and executors
            from_secret = [{"secretRef": {"name": self.credentials_secret}}]
            containers = [{"name": name, "envFrom": from_secret} for name in ("driver", "executor")]
            spec["podTemplate"] = {"spec": {"containers": containers}}
        return self.platform.job_spec(spec)

    @property
    def credentials_secret(self) -> str:
        return f"{self.name}-s3"

    async def apply(self, replicas: int = 2) -> None:
        if self.s3 is not None:
            await self.kubectl.create_secret(self.credentials_secret, self.s3.environment)
        await self.kubectl.apply(self.name, self.spec(replicas))

    async def status(self) -> dict[str, Any]:
        return await self.kubectl.status(self.name)

    async def wait_for(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = STARTS_WITHIN_S
    ) -> dict[str, Any]:
        """The job's status once `condition` holds for it; the logs in the failure otherwise."""
        latest: dict[str, Any] = {}

        async def holds() -> bool:
            nonlocal latest
            latest = await self.status()
            return condition(latest)

        try:
            await eventually_true(holds, f"{self.name}: {what}", timeout_s, poll_s=0.2)
        except AssertionError as error:
            raise AssertionError(f"{error}\nstatus: {latest}\n{await self.platform.diagnostics()}") from None
        return latest

    async def running(self, launch: int, replicas: int | None = None) -> dict[str, Any]:
        """Running with driver `launch` (at `replicas`), a checkpoint of that launch completed."""

        def ready(status: dict[str, Any]) -> bool:
            return (
                status.get("phase") == "Running"
                and status.get("launch") == launch
                and (replicas is None or status.get("replicas") == replicas)
            )

        return await self.wait_for(
            ready, f"Running as launch {launch}" + (f" at {replicas}" * bool(replicas))
        )

    async def next_checkpoint(self) -> int:
        """Waits for a checkpoint completed after this call; its id."""
        before = ((await self.status()).get("lastCheckpoint") or {}).get("id", 0)
        status = await self.wait_for(
            lambda s: (s.get("lastCheckpoint") or {}).get("id", 0) > before, f"a checkpoint after {before}"
        )
        return int(status["lastCheckpoint"]["id"])

    async def output_is_exact(self) -> None:
        """Every line appended so far is committed, exactly once."""
        expected = self.words.expected()

        async def complete() -> bool:
            return committed(self.output) == expected

        try:
            await eventually_true(
                complete, f"{self.name}: the output of {self.words.batches} batches", 120, 0.3
            )
        except AssertionError as error:
            wrong = difference(expected, committed(self.output))
            raise AssertionError(f"{error}: {wrong}\n{await self.platform.diagnostics()}") from None

    def driver_pod(self, launch: int) -> str:
        return self.names.driver_pod(launch)

    async def driver_says(self) -> JobStatus | None:
        """What the running driver reports of itself through etcd."""
        async with Etcd(self.platform.etcd) as etcd:
            return await read_status(etcd, self.keys)

    async def etcd_keys(self) -> list[bytes]:
        async with Etcd(self.platform.etcd) as etcd:
            return [key for key, _ in await etcd.get_prefix(self.keys.root)]


def snapshot_metadata(url: str) -> CheckpointMetadata:
    """The `_metadata` of a savepoint or checkpoint directory: there only once it is whole."""
    storage = CheckpointStorage(url)
    return read_metadata(storage, storage.root)
