"""What a StreamingJob may ask the operator for.

The operator creates pods and writes storage with its own rights on behalf of
whoever can write a StreamingJob. Writing one must grant no more than creating
a Pod Security "restricted" pod in the job's namespace would: so the spec's pod
fields pass an allowlist, Spark conf keys that grant identity, secrets, volumes
or pod templates are refused, and state goes only under the operator's storage
root, in a directory of the job's own namespace. Each refusal names the field
and the operator option that lifts it; the options are the cluster admin's
choice, never the job author's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lockgate.operator.driver_pod import Cluster, namespace_root, storage_layout
from lockgate.operator.naming import JobNames
from lockgate.runtime.driver.spec_errors import SpecError
from lockgate.runtime.driver.streaming_job import StreamingJobSpec

PRIVILEGED_OPTION = "--allow-privileged-pods"
STORAGE_OPTION = "--allow-custom-storage-roots"

# Pod fields that place or describe a pod without widening what it can reach.
_TEMPLATE_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_METADATA_KEYS = frozenset({"labels", "annotations"})
_POD_SPEC_KEYS = frozenset(
    {
        "containers",
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "imagePullSecrets",
    }
)
_CONTAINER_NAMES = ("driver", "executor")  # the containers the operator and Spark fill in
_CONTAINER_KEYS = frozenset({"name", "resources", "env", "envFrom"})
# Volumes of the namespace's own objects or of the pod's own scratch space; hostPath,
# nfs and the other in-tree kinds reach the node or other tenants' data.
VOLUME_KINDS = frozenset({"configMap", "secret", "persistentVolumeClaim", "emptyDir", "csi", "ephemeral"})
# Spark conf keys that would hand pods an identity, secrets, volumes or a whole pod
# spec past the checks above; each with the spec field to use instead.
_REFUSED_CONF = {
    "spark.kubernetes.authenticate.": "identity: use spec.serviceAccountName",
    "spark.kubernetes.kerberos.": "identity",
    "spark.kerberos.": "identity",
    "spark.kubernetes.driver.secrets.": "secrets: use spec.volumes and spec.volumeMounts",
    "spark.kubernetes.executor.secrets.": "secrets: use spec.volumes and spec.volumeMounts",
    "spark.kubernetes.driver.secretKeyRef.": "secrets: use env valueFrom in spec.podTemplate",
    "spark.kubernetes.executor.secretKeyRef.": "secrets: use env valueFrom in spec.podTemplate",
    "spark.kubernetes.driver.volumes.": "volumes: use spec.volumes and spec.volumeMounts",
    "spark.kubernetes.executor.volumes.": "volumes: use spec.volumes and spec.volumeMounts",
    "spark.kubernetes.driver.podTemplate": "pod templates: use spec.podTemplate",
    "spark.kubernetes.executor.podTemplate": "pod templates: use spec.podTemplate",
    "spark.kubernetes.driver.pod.featureSteps": "arbitrary pod changes",
    "spark.kubernetes.executor.pod.featureSteps": "arbitrary pod changes",
    "spark.kubernetes.hadoop.configMapName": "Hadoop identity",
    "spark.master": "the API server the operator chose",
    "spark.kubernetes.driver.master": "the API server the operator chose",
    "spark.kubernetes.context": "the API server the operator chose",
}


# The annotation by which whoever manages a namespace lets its StreamingJobs run as a
# ServiceAccount (and so with its cloud identity and its rights).
SERVICE_ACCOUNT_ANNOTATION = "lockgate.dev/streaming-jobs"
SERVICE_ACCOUNT_ALLOWED = "allowed"


@dataclass(frozen=True)
class JobPolicy:
    """The operator's options that widen what a job may ask for (all off by default)."""

    allow_privileged_pods: bool = False
    allow_custom_storage_roots: bool = False


def check_job(spec: StreamingJobSpec, names: JobNames, cluster: Cluster, policy: JobPolicy) -> None:
    """Raises SpecError naming the first field the policy refuses."""
    problems = list(_pod_problems(spec))  # a template of the wrong shape raises under any policy
    if problems and not policy.allow_privileged_pods:
        raise SpecError(
            f"{problems[0]}; a cluster admin can allow it with the operator's {PRIVILEGED_OPTION}"
        )
    if not policy.allow_custom_storage_roots:
        check_storage(spec, names, cluster)


def _pod_problems(spec: StreamingJobSpec) -> Iterator[str]:
    yield from _template_problems(spec.pod_template)
    yield from _volume_problems(spec.volumes, "spec.volumes")
    for key in spec.spark_conf:
        for prefix, what in _REFUSED_CONF.items():
            if key.startswith(prefix):
                yield f"spec.sparkConf[{key!r}] is refused ({what})"


def _template_problems(template: Mapping[str, Any]) -> Iterator[str]:
    yield from _unknown(template, _TEMPLATE_KEYS, "spec.podTemplate")
    metadata = _mapping(template.get("metadata"), "spec.podTemplate.metadata")
    yield from _unknown(metadata, _METADATA_KEYS, "spec.podTemplate.metadata")
    pod = _mapping(template.get("spec"), "spec.podTemplate.spec")
    yield from _unknown(pod, _POD_SPEC_KEYS, "spec.podTemplate.spec")
    volumes = pod.get("volumes", [])
    if not isinstance(volumes, list):
        raise SpecError(f"spec.podTemplate.spec.volumes must be a list, got {volumes!r}")
    yield from _volume_problems(volumes, "spec.podTemplate.spec.volumes")
    containers = pod.get("containers", [])
    if not isinstance(containers, list):
        raise SpecError(f"spec.podTemplate.spec.containers must be a list, got {containers!r}")
    for index, item in enumerate(containers):
        where = f"spec.podTemplate.spec.containers[{index}]"
        container = _mapping(item, where)
        if container.get("name") not in _CONTAINER_NAMES:
            yield f"{where}: only containers named {' or '.join(_CONTAINER_NAMES)} may be given, not sidecars"
        yield from _unknown(container, _CONTAINER_KEYS, where)


def _volume_problems(volumes: list[Any], where: str) -> Iterator[str]:
    for index, item in enumerate(volumes):
        volume = _mapping(item, f"{where}[{index}]")
        kinds = sorted(set(volume) - {"name"})
        if len(kinds) != 1 or kinds[0] not in VOLUME_KINDS:
            yield (
                f"{where}[{index}] ({volume.get('name')}) is of kind {'/'.join(kinds) or 'none'}: "
                f"allowed are {', '.join(sorted(VOLUME_KINDS))}"
            )


def _unknown(mapping: Mapping[str, Any], allowed: frozenset[str], where: str) -> Iterator[str]:
    for key in sorted(set(mapping) - allowed):
        yield f"{where}.{key} is refused: allowed are {', '.join(sorted(allowed))}"


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    """`value` as an object; absent or null (YAML's `spec:` with nothing under it) as an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be an object, got {value!r}")
    return value


def check_storage(spec: StreamingJobSpec, names: JobNames, cluster: Cluster) -> None:
    """Where the job's checkpoints and savepoints go, and the savepoint it imports
    (importUnsignedSavepoint, initialSavepointPath), must lie in the namespace's
    directory of the operator's storage root: one namespace cannot point a job at
    another's state (to read it, or to restore it into its own job)."""
    named = {
        "spec.checkpointing.storage": spec.checkpointing.storage,
        "spec.savepoints.dir": spec.savepoints.dir,
        "spec.job.importUnsignedSavepoint": spec.job.import_unsigned_savepoint,
        "spec.initialSavepointPath": spec.initial_savepoint_path,
    }
    given = {field: url for field, url in named.items() if url is not None}
    if not given:
        return  # the operator's own layout
    if cluster.checkpoint_storage is None:
        field, url = next(iter(given.items()))
        raise SpecError(
            f"{field} {url!r} is refused: the operator has no storage root (its --checkpoint-storage) "
            f"to keep namespaces apart; remove {field}, or a cluster admin can allow locations of "
            f"the job's choosing with the operator's {STORAGE_OPTION}"
        )
    allowed = namespace_root(cluster.checkpoint_storage, names.namespace)
    layout = storage_layout(names, spec, cluster)
    # Storage and directories as the job's state goes under them; a savepoint to import is where it says.
    located = {"spec.checkpointing.storage": layout.checkpoints, "spec.savepoints.dir": layout.savepoints}
    for field, url in given.items():
        if not _inside(located.get(field, url), allowed):
            raise SpecError(
                f"{field} {url!r} puts state outside {allowed}/, the directory of namespace "
                f"{names.namespace} in the operator's storage root; remove it to use the default, or a "
                f"cluster admin can allow other locations with the operator's {STORAGE_OPTION}"
            )


def _inside(url: str, directory: str) -> bool:
    if url != directory and not url.startswith(f"{directory}/"):
        return False  # ns-a-other is not under ns-a
    segments = [unquote(segment) for segment in url[len(directory) :].split("/")[1:]]
    if segments and not segments[-1]:
        segments.pop()  # a trailing slash
    # `..` climbs out of the directory once a filesystem resolves it; `.` and empty
    # segments make one location look like two.
    return all(segment not in ("", ".", "..") for segment in segments)


def check_service_account(
    spec: StreamingJobSpec, namespace: str, annotations: Mapping[str, str] | None, policy: JobPolicy
) -> None:
    """`spec.serviceAccountName` names an account of the namespace that its manager
    marked for StreamingJobs (`annotations`: that account's, None if it does not
    exist). The operator creates the pods, so without this a job author could run
    as any account of the namespace without the right to create pods as it."""
    name = spec.service_account_name
    if name is None or policy.allow_privileged_pods:
        return
    if annotations is None:
        raise SpecError(f"spec.serviceAccountName {name!r}: no such ServiceAccount in namespace {namespace}")
    if annotations.get(SERVICE_ACCOUNT_ANNOTATION) != SERVICE_ACCOUNT_ALLOWED:
        raise SpecError(
            f"spec.serviceAccountName {name!r} is not marked for StreamingJobs: whoever manages namespace "
            f"{namespace} allows it with `kubectl annotate serviceaccount {name} "
            f"{SERVICE_ACCOUNT_ANNOTATION}={SERVICE_ACCOUNT_ALLOWED}`, or a cluster admin allows every "
            f"account with the operator's {PRIVILEGED_OPTION}"
        )
