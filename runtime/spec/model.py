"""The StreamingJob resource: the one model of its spec, read by the operator and
by `lockgate run job.yaml` alike.

The one place each setting's default, bound and description is written: the CRD
(`crds/streamingjob.yaml`, generated from it by scripts/generate_crd.py),
`lockgate run`'s flags and the driver's options derive theirs from it. Unknown fields are refused, as
`kubectl apply` refuses them, and so are values of the wrong type ("3" for an
integer), which YAML makes easy to write. `parse_spec` and `read_manifest` raise
`SpecError`, its message naming every field that is wrong and what it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from lockgate.runtime.coordination.keys import check_name
from lockgate.runtime.keygroups import UPPER_BOUND_MAX_PARALLELISM
from lockgate.runtime.spec.durations import DURATION_PATTERN, EXAMPLES, parse_duration
from lockgate.runtime.spec.errors import SpecError, describe
from lockgate.runtime.storage_url import check_storage_url
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

KIND = "StreamingJob"
INT32 = 2**31 - 1
_ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")

RestartType = Literal["none", "fixed-delay", "exponential-backoff", "failure-rate"]
"""Flink's restart strategies: the runtime's one list of them (`engine.restart` applies them)."""
UpgradeMode = Literal["savepoint", "last-state", "stateless"]
DesiredState = Literal["running", "suspended"]


def _seconds(value: object) -> float:
    """A duration string, or a whole number of seconds as YAML writes `interval: 10`
    (what the CRD takes: an integer or a string, never a fraction)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_duration(str(value))
    if isinstance(value, float):
        raise ValueError(
            f"a number here is whole seconds; got {value!r}: write it as a duration like "
            f"{value:g}s or quote it"
        )
    if not isinstance(value, str):
        raise ValueError(f"must be a duration like {EXAMPLES}, got {value!r}")
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


DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "minimum": 0,  # checks only an integer, as `pattern` only a string
    "pattern": DURATION_PATTERN,
}
"""A whole number of seconds or a duration string: what `_seconds` takes, as the CRD
writes it. The API server takes an integer-or-string only with exactly these two
branches, so the bounds stand beside them (as controller-gen writes a quantity's)."""
QUANTITY_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_DURATION_SCHEMA = WithJsonSchema(DURATION_SCHEMA)
Duration = Annotated[float, BeforeValidator(_seconds), _DURATION_SCHEMA]
PositiveDuration = Annotated[float, BeforeValidator(_seconds), AfterValidator(_positive), _DURATION_SCHEMA]
StorageUrl = Annotated[str, AfterValidator(_storage)]
Quantity = Annotated[
    str, BeforeValidator(_quantity), AfterValidator(_valid_quantity), WithJsonSchema(QUANTITY_SCHEMA)
]


class _Object(BaseModel):
    """A mapping of the spec: its camelCase keys only, nothing unknown, no coercion."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )


class JobSection(_Object):
    entrypoint: str = Field(json_schema_extra={"pattern": _ENTRYPOINT.pattern})
    """module:function that builds the dataflow, e.g. jobs.wordcount:build"""
    args: dict[str, str] = Field(default_factory=dict)
    """Arguments the job reads from env.args."""
    allow_non_restored_state: bool = False
    """Restore a savepoint or checkpoint although some of its state belongs to no vertex of the job (a
    vertex renamed or removed): that state is dropped. Without it such a restore is refused, naming
    the state."""
    accept_duplicate_output: bool = False
    """Restore a checkpoint older than the newest one that completed, when the newer ones are lost,
    damaged or replaced in storage: the output the sinks committed after it is written again. Without
    it such a restore is refused, naming the checkpoints, and the job fails."""
    import_unsigned_savepoint: StorageUrl | None = None
    """A savepoint or checkpoint URL to restore although this job's snapshot key did not sign it (taken
    by a Lockgate from before snapshot signing, or by another job). Its state is unpickled, so name only
    one whose writers you trust. Restored on the first launch, or at once when the value changes; what
    the job takes after is signed with its own key. Must lie in the namespace's directory of the
    operator's storage root."""

    @field_validator("entrypoint")
    @classmethod
    def _module_function(cls, entrypoint: str) -> str:
        if not _ENTRYPOINT.match(entrypoint):
            raise ValueError(f"must be module:function, e.g. jobs.wordcount:build; got {entrypoint!r}")
        return entrypoint


class Checkpointing(_Object):
    interval_s: PositiveDuration = Field(10.0, alias="interval")
    """How often a checkpoint starts."""
    timeout_s: PositiveDuration = Field(600.0, alias="timeout")
    """A checkpoint not complete by then is aborted."""
    min_pause_s: Duration = Field(0.0, alias="minPause")
    """The least time between one checkpoint's end and the next one's start."""
    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"
    """exactly-once aligns barriers; at-least-once does not wait for them."""
    aligned_timeout_s: Duration | None = Field(None, alias="alignedCheckpointTimeout")
    """exactly-once: a keyed vertex that has aligned a checkpoint's barriers this long takes it
    unaligned, keeping the records in flight as channel state (0: always unaligned; unset: always
    aligned). Savepoints are always aligned."""
    max_concurrent: int = Field(1, ge=1, le=INT32)
    """Checkpoints in flight at once."""
    tolerable_failures: int = Field(0, ge=0, le=INT32)
    """Failed checkpoints in a row the job survives; one more fails it."""
    retained: int = Field(2, ge=1, le=INT32)
    """Completed checkpoints kept: the newest restores, the one before it covers a damaged newest."""
    incremental: bool = True
    """RocksDB checkpoints upload only new SST files; false takes full snapshots."""
    storage: StorageUrl | None = None
    """Checkpoint storage URL (s3://, gs://, file:// on a shared volume)."""

    @model_validator(mode="after")
    def _unaligned_only_when_exactly_once(self) -> Checkpointing:
        if self.aligned_timeout_s is not None and self.mode != "exactly-once":
            raise ValueError(
                "alignedCheckpointTimeout applies to exactly-once checkpoints; at-least-once never "
                "aligns: unset it, or set mode: exactly-once"
            )
        if self.aligned_timeout_s is not None and self.aligned_timeout_s >= self.timeout_s:
            raise ValueError(
                f"alignedCheckpointTimeout {self.aligned_timeout_s:g} s is not below timeout "
                f"{self.timeout_s:g} s: every checkpoint would be aborted before it went unaligned; "
                "give a shorter alignedCheckpointTimeout (0s: always unaligned)"
            )
        return self


class Savepoints(_Object):
    dir: StorageUrl | None = None
    """Savepoint directory URL (default: the job's _savepoints directory beside its checkpoints)."""
    trigger_nonce: int | None = Field(None, ge=-(2**31), le=INT32)
    """Change it to take a savepoint without stopping the job."""
    interval_s: PositiveDuration | None = Field(None, alias="interval")
    """Take a savepoint this often while the job runs (periodic savepoints; unset, none)."""
    history_size: int = Field(10, ge=1, le=100)
    """How many savepoints status.savepoints keeps; the operator disposes of its own that fall out."""
    history_max_age_s: PositiveDuration | None = Field(None, alias="historyMaxAge")
    """Savepoints older than this fall out of the history (the newest completed one never does)."""
    timeout_s: PositiveDuration = Field(300.0, alias="timeout")
    """How long the operator waits for a savepoint it asked for."""

    @field_validator("interval_s")
    @classmethod
    def _at_least_a_second(cls, interval_s: float | None) -> float | None:
        # Each periodic savepoint is named by the second it falls due in.
        if interval_s is not None and interval_s < 1:
            raise ValueError(f"must be at least 1s; got {interval_s:g} s")
        return interval_s


class Deletion(_Object):
    """What deleting the StreamingJob does besides stopping it."""

    savepoint: bool = False
    """Stop the job with a final savepoint (kept in savepoints.dir)."""
    checkpoints: Literal["keep", "delete"] = "keep"
    """Whether the job's checkpoint files are removed from storage."""


class RestartStrategySpec(_Object):
    DEFAULT_ATTEMPTS: ClassVar[Mapping[str, int]] = {"fixed-delay": 3, "failure-rate": 1}
    """`attempts` when unset, by type (exponential-backoff: unbounded)."""

    type: RestartType = "exponential-backoff"
    """Flink's strategies: what a failure of the job leads to."""
    attempts: int | None = Field(
        None,
        ge=1,
        le=INT32,
        description="fixed-delay: restarts in the job's life "
        f"({DEFAULT_ATTEMPTS['fixed-delay']}); exponential-backoff: at most (unbounded); "
        f"failure-rate: failures allowed within failureInterval ({DEFAULT_ATTEMPTS['failure-rate']}).",
    )
    delay_s: Duration = Field(1.0, alias="delay")
    """Before a restart; exponential-backoff's first delay."""
    max_delay_s: Duration = Field(60.0, alias="maxDelay")
    """exponential-backoff: the cap of its delay."""
    failure_interval_s: PositiveDuration = Field(60.0, alias="failureInterval")
    """failure-rate: the window failures are counted in."""


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


class AutoscalerSpec(_Object):
    """Sizes the job to its load (runtime/autoscaling): while enabled it owns the running
    parallelism, and spec.replicas is only the one a new driver starts at."""

    enabled: bool = False
    """Rescale the running job in place to the parallelism its load needs: its input rate plus its
    backlog caught up within catchUpDuration, at targetUtilization of each subtask's busy time."""
    min_replicas: int = Field(1, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    """The fewest subtasks the autoscaler runs the job at."""
    max_replicas: int | None = Field(None, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    """The most subtasks the autoscaler runs the job at (unset: maxParallelism, the key groups)."""
    target_utilization: float = Field(0.7, ge=0.1, le=1)
    """The share of each subtask's time the job may be busy at the parallelism chosen (0.1 to 1)."""
    catch_up_s: PositiveDuration = Field(300.0, alias="catchUpDuration")
    """The backlog is sized to be read within this, on top of the input rate."""
    window_s: PositiveDuration = Field(60.0, alias="stabilizationWindow")
    """The metrics window a decision measures the load over; after a start or a rescale the first
    half of one is left out (restoring and catching up skew it)."""
    scale_down_delay_s: Duration = Field(600.0, alias="scaleDownDelay")
    """A scale-down happens only once every recommendation for this long was lower (a scale-up
    happens at once)."""

    @model_validator(mode="after")
    def _bounds_in_order(self) -> AutoscalerSpec:
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise _whole(
                f"spec.autoscaler.minReplicas {self.min_replicas} exceeds spec.autoscaler.maxReplicas "
                f"{self.max_replicas}"
            )
        return self


class Etcd(_Object):
    endpoints: str | None = None
    """Overrides the operator's etcd endpoints."""


_SPEC_RULES: list[JsonValue] = [
    {
        "rule": "!has(self.maxParallelism) || self.replicas <= self.maxParallelism",
        "message": "replicas must not exceed maxParallelism (the number of key groups)",
        "fieldPath": ".replicas",
    },
    {
        "rule": "!has(oldSelf.maxParallelism) || "
        "(has(self.maxParallelism) && self.maxParallelism == oldSelf.maxParallelism)",
        "message": "maxParallelism cannot change once set: it fixes how keyed state is split into key groups",
        "fieldPath": ".maxParallelism",
    },
]
"""`_consistent`'s check, and the one only the API server can make (it sees the old
object), as the CRD's CEL rules."""


class StreamingJobSpec(_Object):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _SPEC_RULES})

    image: str | None = Field(None, min_length=1)
    """Image with Python, Java 17, pyspark, lockgate and the job's code (required on a cluster; a local
    run has no use for it)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    job: JobSection
    replicas: int = Field(2, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    """Parallelism of every vertex; one Spark executor per subtask."""
    max_parallelism: int | None = Field(None, ge=1, le=UPPER_BOUND_MAX_PARALLELISM)
    """Number of key groups; fixed for the life of the job's state (unset: Flink's rule from replicas)."""
    state_backend: Literal["rocksdb", "heap"] = "rocksdb"
    """Where keyed state lives: RocksDB on local disk, or the task's memory."""
    checkpointing: Checkpointing = Checkpointing()
    savepoints: Savepoints = Savepoints()
    initial_savepoint_path: StorageUrl | None = None
    """A savepoint the job's first launch restores (changing it later does nothing). Whoever creates
    the job vouches for it, as for job.importUnsignedSavepoint."""
    deletion: Deletion = Deletion()
    upgrade_mode: UpgradeMode = "savepoint"
    """How a spec change carries state into the restarted job."""
    state: DesiredState = "running"
    restart_strategy: RestartStrategySpec = RestartStrategySpec()
    restart_nonce: int | None = Field(None, ge=-(2**31), le=INT32)
    """Change it to restart the job from its latest checkpoint."""
    driver: PodResources = PodResources()
    executor: PodResources = PodResources()
    spark_conf: dict[str, str] = Field(default_factory=dict)
    service_account_name: str | None = None
    """Run the driver and its executors as this service account (its cloud identity reaches every pod
    that uploads state) instead of the driver as one the operator creates."""
    pod_template: dict[str, Any] = Field(default_factory=dict)
    """Merged into the driver and executor pods (labels, annotations, tolerations, ...); its container
    named driver gives the driver's container its env and envFrom, its container named executor is
    merged into every executor's."""
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    """Pod volumes for the driver and every executor (a shared claim for file:// storage)."""
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra={
            "items": {
                "type": "object",
                "required": ["name", "mountPath"],
                "properties": {"name": {"type": "string"}, "mountPath": {"type": "string"}},
                "additionalProperties": True,
            }
        },
    )
    """Mounted at the same paths in the driver and every executor container."""
    etcd: Etcd = Etcd()
    autoscaler: AutoscalerSpec = AutoscalerSpec()

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
        self._autoscaler_fits()
        declared = {volume["name"] for volume in self.volumes}
        for index, mount in enumerate(self.volume_mounts):
            if mount.get("name") not in declared or not mount.get("mountPath"):
                raise _whole(
                    f"spec.volumeMounts[{index}] must name a volume of spec.volumes ({sorted(declared)}) "
                    f"and give a mountPath; got {mount}"
                )
        return self

    def _autoscaler_fits(self) -> None:
        autoscaler = self.autoscaler
        if not autoscaler.enabled:
            return
        top = autoscaler.max_replicas
        if self.max_parallelism is not None and top is not None and top > self.max_parallelism:
            raise _whole(
                f"spec.autoscaler.maxReplicas {top} exceeds spec.maxParallelism {self.max_parallelism}: "
                "a subtask needs at least one key group"
            )
        if not autoscaler.min_replicas <= self.replicas <= (top or self.replicas):
            raise _whole(
                f"spec.replicas {self.replicas} is outside spec.autoscaler's [{autoscaler.min_replicas}, "
                f"{top or 'maxParallelism'}]: the job starts at spec.replicas, so give one within the "
                "autoscaler's range"
            )

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


def field_at(path: str) -> FieldInfo:
    """The model's field a manifest path names (`spec.checkpointing.interval`): its
    default, bounds and description, which flags derived from it show."""
    model: type[BaseModel] = StreamingJobManifest
    field: FieldInfo | None = None
    for name in path.split("."):
        if field is not None:
            model = _model_of(field)
        field = next(f for attribute, f in model.model_fields.items() if (f.alias or attribute) == name)
    assert field is not None, path
    return field


def _model_of(field: FieldInfo) -> type[BaseModel]:
    annotation = field.annotation
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise TypeError(f"{annotation!r} has no fields")
    return annotation


def resolved_document(manifest: StreamingJobManifest | None, entrypoint: str) -> dict[str, Any]:
    """A manifest as the model resolves it, every default filled in (a run without a
    manifest: the defaults of every field, for the job `entrypoint`)."""
    if manifest is None:
        spec = StreamingJobSpec.model_construct(job=JobSection.model_construct(entrypoint=entrypoint))
        metadata = {"namespace": Metadata.model_fields["namespace"].default}
        return {"metadata": metadata, "spec": spec.model_dump(by_alias=True)}
    return manifest.model_dump(by_alias=True)


FieldKind = Literal["duration", "positive duration", "storage url"]


def kind_of(field: FieldInfo) -> tuple[Any, FieldKind | None]:
    """A field's Python type (None taken out of `X | None`), and which of the model's
    own kinds of value it is, if any: what a flag that sets it must parse."""
    annotation = field.annotation
    members = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(members) == 1:
        annotation = members[0]
    metadata = list(field.metadata)
    if get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    validators = {m.func for m in metadata if isinstance(m, AfterValidator)}
    if _DURATION_SCHEMA in metadata:
        return annotation, "positive duration" if _positive in validators else "duration"
    return annotation, "storage url" if _storage in validators else None
