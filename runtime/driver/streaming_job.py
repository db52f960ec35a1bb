"""The StreamingJob resource: the one model of its spec, read by the operator and
by `lockgate run job.yaml` alike.

It mirrors the CRD (`crds/streamingjob.yaml`; a test holds the two together):
the same field names, enums, bounds and defaults. Unknown fields are refused, as
`kubectl apply` refuses them, and so are values of the wrong type ("3" for an
integer), which YAML makes easy to write. `parse_spec` and `read_manifest` raise
`SpecError`, its message naming every field that is wrong and what it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from lockgate.runtime.coordination.keys import check_name
from lockgate.runtime.driver.durations import DURATION_PATTERN, EXAMPLES, parse_duration
from lockgate.runtime.driver.spec_errors import SpecError, describe
from lockgate.runtime.engine.restart import RestartKind, RestartStrategy, restart_strategy
from lockgate.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM
from lockgate.runtime.storage_url import check_storage_url
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

KIND = "StreamingJob"
INT32 = 2**31 - 1
_ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")

RestartType = RestartKind  # the runtime's one list of strategies
UpgradeMode = Literal["savepoint", "last-state", "stateless"]
DesiredState = Literal["running", "suspended"]


def _seconds(value: object) -> float:
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string like {EXAMPLES}, got {value!r}")
    return parse_duration(value)


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    return seconds


def _storage(url: str) -> str:
    # Only the URL's shape: whether its filesystem is installed, and what is at a local
    # path, are the concern of the driver that uses it.
    return check_storage_url(url, installed=False, on_this_host=False)


def _quantity(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class QuantityGrammarMissingError(ValueError):
    """The package that reads quantities is not installed (it comes with the operator)."""


def amount_of(quantity: str) -> Decimal:
    """By the API server's own grammar. Imported here, not at the top: kubernetes
    takes 0.3 s to import, which every `lockgate run` would pay; only a spec with
    resources needs it."""
    try:
        from kubernetes.utils import parse_quantity  # noqa: PLC0415 - see above
    except ImportError:
        raise QuantityGrammarMissingError(
            f"reading the quantity {quantity!r} needs the kubernetes package, which the operator "
            "brings: pip install 'lockgate[operator]'"
        ) from None

    amount: Decimal = parse_quantity(quantity)  # type: ignore[no-untyped-call]
    return amount


def _valid_quantity(text: str) -> str:
    """Refused here rather than when a pod or Spark's conf is built from it."""
    try:
        amount = amount_of(text)
    except QuantityGrammarMissingError:
        raise
    except ValueError:
        raise ValueError(f"{text!r} is not a quantity like 500m, 2, 512Mi or 1.5Gi") from None
    if amount < 0:
        raise ValueError(f"must not be negative, got {text!r}")
    return text


_DURATION_SCHEMA = WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN})
Duration = Annotated[float, BeforeValidator(_seconds), _DURATION_SCHEMA]
PositiveDuration = Annotated[float, BeforeValidator(_seconds), AfterValidator(_positive), _DURATION_SCHEMA]
StorageUrl = Annotated[str, AfterValidator(_storage)]
Quantity = Annotated[str, BeforeValidator(_quantity), AfterValidator(_valid_quantity)]  # int-or-string


class _Object(BaseModel):
    """A mapping of the spec: its camelCase keys only, nothing unknown, no coercion."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True, strict=True)


class JobSection(_Object):
    entrypoint: str = Field(json_schema_extra={"pattern": _ENTRYPOINT.pattern})
    args: dict[str, str] = Field(default_factory=dict)
    allow_non_restored_state: bool = False
    """Restore a snapshot although some of its state belongs to no vertex of the job
    (that state is dropped), as Flink's `allowNonRestoredState`."""
    accept_duplicate_output: bool = False
    """Restore a checkpoint older than the newest completed one (the newer ones lost,
    damaged or replaced in storage), writing again the output committed after it."""
    import_unsigned_savepoint: StorageUrl | None = None
    """A snapshot to restore although the job's key did not sign it (one from before
    snapshot signing, or another job's): the one snapshot its author vouches for."""

    @field_validator("entrypoint")
    @classmethod
    def _module_function(cls, entrypoint: str) -> str:
        if not _ENTRYPOINT.match(entrypoint):
            raise ValueError(f"must be module:function, e.g. jobs.wordcount:build; got {entrypoint!r}")
        return entrypoint


class Checkpointing(_Object):
    interval_s: PositiveDuration = Field(10.0, alias="interval")
    timeout_s: PositiveDuration = Field(600.0, alias="timeout")
    min_pause_s: Duration = Field(0.0, alias="minPause")
    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"
    max_concurrent: int = Field(1, ge=1, le=INT32)
    tolerable_failures: int = Field(0, ge=0, le=INT32)
    retained: int = Field(2, ge=1, le=INT32)
    incremental: bool = True
    storage: StorageUrl | None = None


class Savepoints(_Object):
    dir: StorageUrl | None = None
    trigger_nonce: int | None = Field(None, ge=-(2**31), le=INT32)
    interval_s: PositiveDuration | None = Field(None, alias="interval")
    """Periodic savepoints, taken by the operator while the job runs."""
    history_size: int = Field(10, ge=1, le=100)
    history_max_age_s: PositiveDuration | None = Field(None, alias="historyMaxAge")
    timeout_s: PositiveDuration = Field(300.0, alias="timeout")

    @field_validator("interval_s")
    @classmethod
    def _at_least_a_second(cls, interval_s: float | None) -> float | None:
        # Each periodic savepoint is named by the second it falls due in.
        if interval_s is not None and interval_s < 1:
            raise ValueError(f"must be at least 1s; got {interval_s:g} s")
        return interval_s


class Deletion(_Object):
    savepoint: bool = False
    checkpoints: Literal["keep", "delete"] = "keep"


class RestartStrategySpec(_Object):
    type: RestartType = "exponential-backoff"
    attempts: int | None = Field(None, ge=1, le=INT32)
    delay_s: Duration | None = Field(None, alias="delay")
    max_delay_s: Duration | None = Field(None, alias="maxDelay")
    failure_interval_s: PositiveDuration | None = Field(None, alias="failureInterval")

    def strategy(self) -> RestartStrategy:
        """The strategy these settings give, with the defaults for what is not set."""
        return restart_strategy(self.type, **self.model_dump(exclude={"type"}))


class Resources(_Object):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for name in self.requests.keys() & self.limits.keys():
            request, limit = self.requests[name], self.limits[name]
            if amount_of(request) > amount_of(limit):
                raise ValueError(f"requests.{name} {request} is more than limits.{name} {limit}")
        return self


class PodResources(_Object):
    resources: Resources = Resources()


class Etcd(_Object):
    endpoints: str | None = None


class StreamingJobSpec(_Object):
    image: str | None = Field(None, min_length=1)
    """Required on a cluster (the operator checks it); a local run has no use for it."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    job: JobSection
    replicas: int = Field(2, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    max_parallelism: int | None = Field(None, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    state_backend: Literal["rocksdb", "heap"] = "rocksdb"
    checkpointing: Checkpointing = Checkpointing()
    savepoints: Savepoints = Savepoints()
    initial_savepoint_path: StorageUrl | None = None
    """The savepoint a new job's first launch restores (later changes do nothing);
    whoever creates the job vouches for it, as for `job.importUnsignedSavepoint`."""
    deletion: Deletion = Deletion()
    upgrade_mode: UpgradeMode = "savepoint"
    state: DesiredState = "running"
    restart_strategy: RestartStrategySpec = RestartStrategySpec()
    restart_nonce: int | None = Field(None, ge=-(2**31), le=INT32)
    driver: PodResources = PodResources()
    executor: PodResources = PodResources()
    spark_conf: dict[str, str] = Field(default_factory=dict)
    service_account_name: str | None = None
    pod_template: dict[str, Any] = Field(default_factory=dict)
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list)
    """Mounted at the same paths in the driver and every executor: a shared
    volume for `file://` checkpoint storage, say (both read and write it)."""
    etcd: Etcd = Etcd()

    @field_validator("volumes")
    @classmethod
    def _named(cls, volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, volume in enumerate(volumes):
            if not isinstance(volume.get("name"), str) or not volume["name"]:
                raise _whole(f"spec.volumes[{index}] must be an object with a name; got {volume}")
        return volumes

    @model_validator(mode="after")
    def _consistent(self) -> StreamingJobSpec:
        if self.initial_savepoint_path is not None and self.job.import_unsigned_savepoint is not None:
            raise _whole(
                "spec.initialSavepointPath and spec.job.importUnsignedSavepoint both name a savepoint "
                "to restore: set one (initialSavepointPath for a new job, importUnsignedSavepoint "
                "for one that runs)"
            )
        if self.max_parallelism is not None and self.replicas > self.max_parallelism:
            raise _whole(
                f"spec.replicas {self.replicas} exceeds spec.maxParallelism {self.max_parallelism}: "
                "a subtask needs at least one key group"
            )
        declared = {volume["name"] for volume in self.volumes}
        for index, mount in enumerate(self.volume_mounts):
            if mount.get("name") not in declared or not mount.get("mountPath"):
                raise _whole(
                    f"spec.volumeMounts[{index}] must name a volume of spec.volumes ({sorted(declared)}) "
                    f"and give a mountPath; got {mount}"
                )
        return self

    # The names the operator reads the nested sections by.
    @property
    def entrypoint(self) -> str:
        return self.job.entrypoint

    @property
    def args(self) -> dict[str, str]:
        return self.job.args

    @property
    def driver_resources(self) -> Resources:
        return self.driver.resources

    @property
    def executor_resources(self) -> Resources:
        return self.executor.resources

    @property
    def etcd_endpoints(self) -> str | None:
        return self.etcd.endpoints


def _name(kind: str) -> Any:
    return AfterValidator(lambda name: check_name(kind, name, say_kind=False))


class Metadata(BaseModel):
    """A Kubernetes object's metadata: only the name and namespace are read."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    name: Annotated[str, _name("metadata.name")]
    namespace: Annotated[str, _name("metadata.namespace")] = "default"


class StreamingJobManifest(_Object):
    api_version: Literal["lockgate.dev/v1alpha1"] | None = None
    kind: Literal["StreamingJob"]
    metadata: Metadata
    spec: StreamingJobSpec
    status: dict[str, Any] | None = None
    """As `kubectl get -o yaml` writes it; never read."""


def _whole(message: str) -> PydanticCustomError:
    """An error whose message names its fields itself (it is about several)."""
    return PydanticCustomError("whole", message)


def parse_spec(spec: Any) -> StreamingJobSpec:
    """A StreamingJob's `spec`; raises SpecError naming every field that is wrong."""
    try:
        return StreamingJobSpec.model_validate({} if spec is None else spec)
    except ValidationError as error:
        raise SpecError(describe(error, StreamingJobSpec, "spec")) from None


def read_manifest(document: Mapping[str, Any]) -> StreamingJobManifest:
    """A whole StreamingJob object; raises SpecError naming every field that is wrong."""
    try:
        return StreamingJobManifest.model_validate(document)
    except ValidationError as error:
        raise SpecError(describe(error, StreamingJobManifest, "")) from None
