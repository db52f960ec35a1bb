"""A StreamingJob's spec as frozen data, with the CRD's defaults applied.

The API server applies the CRD's defaults; the operator applies them again so
an object written before a CRD upgrade, or served by a server that does not
default, reads the same. Errors name the field and what would be accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lockgate.runtime.driver.manifest import ManifestError, duration_s
from lockgate.runtime.engine.restart import STRATEGIES as RESTART_STRATEGIES

UpgradeMode = Literal["savepoint", "last-state", "stateless"]
DesiredState = Literal["running", "suspended"]

_ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
MAX_KEY_GROUPS = 32768


class SpecError(ValueError):
    """The spec cannot be run; the message names the field."""


@dataclass(frozen=True)
class Checkpointing:
    interval_s: float = 10.0
    timeout_s: float = 600.0
    min_pause_s: float = 0.0
    mode: str = "exactly-once"
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retained: int = 2
    incremental: bool = True
    storage: str | None = None


@dataclass(frozen=True)
class Savepoints:
    dir: str | None = None
    trigger_nonce: int | None = None
    history_size: int = 10
    timeout_s: float = 300.0


@dataclass(frozen=True)
class Deletion:
    savepoint: bool = False
    checkpoints: str = "keep"


@dataclass(frozen=True)
class RestartStrategy:
    type: str = "exponential-backoff"
    attempts: int | None = None
    delay_s: float | None = None
    max_delay_s: float | None = None
    failure_interval_s: float | None = None


@dataclass(frozen=True)
class Resources:
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamingJobSpec:
    image: str
    entrypoint: str
    args: dict[str, str] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    replicas: int = 2
    max_parallelism: int | None = None
    state_backend: str = "rocksdb"
    checkpointing: Checkpointing = Checkpointing()
    savepoints: Savepoints = Savepoints()
    deletion: Deletion = Deletion()
    upgrade_mode: UpgradeMode = "savepoint"
    state: DesiredState = "running"
    restart_strategy: RestartStrategy = RestartStrategy()
    restart_nonce: int | None = None
    driver_resources: Resources = Resources()
    executor_resources: Resources = Resources()
    spark_conf: dict[str, str] = field(default_factory=dict)
    service_account_name: str | None = None
    pod_template: dict[str, Any] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    """Mounted at the same paths in the driver and every executor: a shared
    volume for `file://` checkpoint storage, say (both read and write it)."""
    etcd_endpoints: str | None = None


class _Reader:
    """Typed access to one mapping of the spec, naming `path.key` in errors."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise SpecError(f"{path} must be an object, got {type(data).__name__}")
        self.data, self.path = data, path

    def where(self, key: str) -> str:
        return f"{self.path}.{key}"

    def child(self, key: str) -> _Reader:
        return _Reader(self.data.get(key), self.where(key))

    def optional_int(self, key: str, low: int = 0, high: int = 2**31 - 1) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.where(key)} must be an integer, got {value!r}")
        if not low <= value <= high:
            raise SpecError(f"{self.where(key)} must be between {low} and {high}, got {value}")
        return value

    def integer(self, key: str, default: int, low: int = 0, high: int = 2**31 - 1) -> int:
        value = self.optional_int(key, low, high)
        return default if value is None else value

    def optional_text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise SpecError(f"{self.where(key)} must be a string, got {value!r}")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.optional_text(key)
        if value is None:
            return default
        if value not in choices:
            raise SpecError(f"{self.where(key)} must be one of {', '.join(choices)}; got {value!r}")
        return value

    def optional_seconds(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        try:
            return duration_s(value, self.where(key))
        except ManifestError as error:
            raise SpecError(str(error)) from error

    def seconds(self, key: str, default: float) -> float:
        value = self.optional_seconds(key)
        return default if value is None else value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(f"{self.where(key)} must be true or false, got {value!r}")
        return value

    def objects(self, key: str) -> list[dict[str, Any]]:
        """A list of objects, each with a `name`."""
        items = self.data.get(key) or []
        if not isinstance(items, list):
            raise SpecError(f"{self.where(key)} must be a list, got {type(items).__name__}")
        for index, item in enumerate(items):
            if not isinstance(item, Mapping) or not item.get("name"):
                raise SpecError(f"{self.where(key)}[{index}] must be an object with a name")
        return [dict(item) for item in items]

    def strings(self, key: str) -> dict[str, str]:
        mapping = self.child(key).data
        return {str(k): str(v) for k, v in mapping.items()}


def _resources(reader: _Reader) -> Resources:
    resources = reader.child("resources")
    return Resources(resources.strings("requests"), resources.strings("limits"))


def _checkpointing(reader: _Reader) -> Checkpointing:
    d = Checkpointing()
    return Checkpointing(
        interval_s=reader.seconds("interval", d.interval_s),
        timeout_s=reader.seconds("timeout", d.timeout_s),
        min_pause_s=reader.seconds("minPause", d.min_pause_s),
        mode=reader.choice("mode", d.mode, ("exactly-once", "at-least-once")),
        max_concurrent=reader.integer("maxConcurrent", d.max_concurrent, low=1),
        tolerable_failures=reader.integer("tolerableFailures", d.tolerable_failures),
        retained=reader.integer("retained", d.retained, low=1),
        incremental=reader.flag("incremental", d.incremental),
        storage=reader.optional_text("storage"),
    )


def _savepoints(reader: _Reader) -> Savepoints:
    d = Savepoints()
    return Savepoints(
        dir=reader.optional_text("dir"),
        trigger_nonce=reader.optional_int("triggerNonce", low=-(2**31)),
        history_size=reader.integer("historySize", d.history_size, low=1, high=100),
        timeout_s=reader.seconds("timeout", d.timeout_s),
    )


def _restart_strategy(reader: _Reader) -> RestartStrategy:
    return RestartStrategy(
        type=reader.choice("type", RestartStrategy.type, RESTART_STRATEGIES),
        attempts=reader.optional_int("attempts", low=1),
        delay_s=reader.optional_seconds("delay"),
        max_delay_s=reader.optional_seconds("maxDelay"),
        failure_interval_s=reader.optional_seconds("failureInterval"),
    )


def parse_spec(spec: Any) -> StreamingJobSpec:
    """`spec` of a StreamingJob -> StreamingJobSpec; raises SpecError naming the field."""
    root = _Reader(spec, "spec")
    image = root.optional_text("image")
    if not image:
        raise SpecError(
            "spec.image is required: the image with Python, Java 17, pyspark, lockgate and the job"
        )
    job = root.child("job")
    entrypoint = job.optional_text("entrypoint")
    if entrypoint is None or not _ENTRYPOINT.match(entrypoint):
        raise SpecError(
            f"spec.job.entrypoint must be module:function, e.g. jobs.wordcount:build; got {entrypoint!r}"
        )
    replicas = root.integer("replicas", 2, low=1, high=MAX_KEY_GROUPS)
    max_parallelism = root.optional_int("maxParallelism", low=1, high=MAX_KEY_GROUPS)
    if max_parallelism is not None and replicas > max_parallelism:
        raise SpecError(
            f"spec.replicas {replicas} exceeds spec.maxParallelism {max_parallelism}: "
            "a subtask needs at least one key group"
        )
    volumes, mounts = root.objects("volumes"), root.objects("volumeMounts")
    declared = {volume["name"] for volume in volumes}
    for index, mount in enumerate(mounts):
        if mount["name"] not in declared or not mount.get("mountPath"):
            raise SpecError(
                f"spec.volumeMounts[{index}] must name a volume of spec.volumes ({sorted(declared)}) "
                f"and give a mountPath; got {mount}"
            )
    return StreamingJobSpec(
        image=image,
        entrypoint=entrypoint,
        args=job.strings("args"),
        image_pull_policy=root.choice("imagePullPolicy", "IfNotPresent", ("Always", "IfNotPresent", "Never")),
        replicas=replicas,
        max_parallelism=max_parallelism,
        state_backend=root.choice("stateBackend", "rocksdb", ("rocksdb", "heap")),
        checkpointing=_checkpointing(root.child("checkpointing")),
        savepoints=_savepoints(root.child("savepoints")),
        deletion=Deletion(
            savepoint=root.child("deletion").flag("savepoint", False),
            checkpoints=root.child("deletion").choice("checkpoints", "keep", ("keep", "delete")),
        ),
        upgrade_mode=root.choice("upgradeMode", "savepoint", ("savepoint", "last-state", "stateless")),  # type: ignore[arg-type]
        state=root.choice("state", "running", ("running", "suspended")),  # type: ignore[arg-type]
        restart_strategy=_restart_strategy(root.child("restartStrategy")),
        restart_nonce=root.optional_int("restartNonce", low=-(2**31)),
        driver_resources=_resources(root.child("driver")),
        executor_resources=_resources(root.child("executor")),
        spark_conf=root.strings("sparkConf"),
        service_account_name=root.optional_text("serviceAccountName"),
        pod_template=dict(root.child("podTemplate").data),
        volumes=volumes,
        volume_mounts=mounts,
        etcd_endpoints=root.child("etcd").optional_text("endpoints"),
    )
