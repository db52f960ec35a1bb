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

from lockgate.operator.driver_pod import LAUNCH_ENVIRONMENT, Cluster, namespace_root, storage_layout
from lockgate.operator.naming import JobNames
from lockgate.runtime.spec.errors import SpecError
from lockgate.runtime.spec.model import StreamingJobSpec

PRIVILEGED_OPTION = "--allow-privileged-pods"
STORAGE_OPTION = "--allow-custom-storage-roots"
UNRESTRICTED_NAMESPACES_OPTION = "--allow-unrestricted-namespaces"

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
_SCHEDULER = (
    "a scheduler of the job's choosing places pods past the cluster's placement rules: "
    "use spec.podTemplate nodeSelector, affinity, tolerations"
)
# Spark conf keys that would hand pods an identity, secrets, volumes, a security
# context, a scheduler or a whole pod spec past the checks above; each with the spec
# field to use instead.
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
    "spark.kubernetes.executor.hadoopConfigMapName": "Hadoop identity",
    "spark.kubernetes.securityContext.": "the pods' security context",
    "spark.kubernetes.driver.securityContext.": "the pods' security context",
    "spark.kubernetes.executor.securityContext.": "the pods' security context",
    "spark.kubernetes.scheduler.name": _SCHEDULER,
    "spark.kubernetes.driver.scheduler.name": _SCHEDULER,
    "spark.kubernetes.executor.scheduler.name": _SCHEDULER,
    "spark.master": "the API server the operator chose",
    "spark.kubernetes.driver.master": "the API server the operator chose",
    "spark.kubernetes.context": "the API server the operator chose",
}


# Spark conf keys refused under any policy: they tell one job's pods from another's
# (the operator names the executors itself: spark.kubernetes.executor.podNamePrefix).
_IDENTIFYING_CONF = {
    "spark.app.id": "the application id labels the job's executor pods; another job's would make "
    "this driver take that job's executors for its own",
    "spark.kubernetes.driver.resourceNamePrefix": "it names the objects the driver creates; "
    "another job's would collide with that job's",
}
# Spark conf keys whose remainder is a pod annotation.
_ANNOTATION_CONF = ("spark.kubernetes.driver.annotation.", "spark.kubernetes.executor.annotation.")
# Annotations the kubelet or the container runtime read to change a pod's confinement:
# AppArmor (container.apparmor.security.beta.kubernetes.io/*), seccomp
# (seccomp.security.alpha.kubernetes.io/pod, container.seccomp.security.alpha.kubernetes.io/*),
# sysctls, and the runtimes' own options (CRI-O's devices and user namespaces, Kata's
# hypervisor settings, crun's). Matched by domain, the way the readers match them.
_CONFINEMENT_DOMAINS = ("security.alpha.kubernetes.io", "security.beta.kubernetes.io")
_RUNTIME_ANNOTATIONS = ("io.kubernetes.cri-o.", "io.containerd.", "io.katacontainers.", "run.oci.")
_CONFINEMENT = "an annotation that sets the pods' AppArmor, seccomp, sysctls or container runtime options"


# The annotation by which whoever manages a namespace lets its StreamingJobs run as a
# ServiceAccount (and so with its cloud identity and its rights).
SERVICE_ACCOUNT_ANNOTATION = "lockgate.dev/streaming-jobs"
SERVICE_ACCOUNT_ALLOWED = "allowed"
# Pod Security admission's label. A namespace that enforces "restricted" refuses every
# pod beyond it, whoever asks: the operator, Spark's driver creating executors, or the
# job's own code with the driver's ServiceAccount (which may create pods). Without it,
# this policy binds only the pods the operator and Spark build.
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_RESTRICTED = "restricted"


class NamespaceNotRestrictedError(SpecError):
    """The job's namespace does not enforce Pod Security "restricted": whoever manages
    the namespace can fix it without a change of the job (so it is checked again)."""


@dataclass(frozen=True)
class JobPolicy:
    """The operator's options that widen what a job may ask for (all off by default)."""

    allow_privileged_pods: bool = False
    allow_custom_storage_roots: bool = False
    allow_unrestricted_namespaces: bool = False


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
        if "=" in key:  # under any policy: spark-submit splits `--conf KEY=VALUE` at the first `=`
            raise SpecError(
                f"spec.sparkConf[{key!r}]: a Spark conf key holds no '=' (Spark would read it as the key "
                f"{key.split('=', 1)[0]!r}); remove it"
            )
        if key in _IDENTIFYING_CONF:  # under any policy
            raise SpecError(f"spec.sparkConf[{key!r}] is refused ({_IDENTIFYING_CONF[key]}); remove it")
        for prefix, what in _REFUSED_CONF.items():
            if key.startswith(prefix):
                yield f"spec.sparkConf[{key!r}] is refused ({what})"
        annotation = next((key[len(p) :] for p in _ANNOTATION_CONF if key.startswith(p)), None)
        if annotation is not None and _confines(annotation):
            yield f"spec.sparkConf[{key!r}] is refused ({_CONFINEMENT})"


def _confines(annotation: str) -> bool:
    """Whether the annotation key `annotation` changes what confines a pod's containers."""
    key = annotation.lower()
    domain = key.split("/", 1)[0] if "/" in key else ""
    confinement = any(domain == d or domain.endswith(f".{d}") for d in _CONFINEMENT_DOMAINS)
    return confinement or key.startswith(_RUNTIME_ANNOTATIONS)


def _template_problems(template: Mapping[str, Any]) -> Iterator[str]:
    yield from _unknown(template, _TEMPLATE_KEYS, "spec.podTemplate")
    metadata = _mapping(template.get("metadata"), "spec.podTemplate.metadata")
    yield from _unknown(metadata, _METADATA_KEYS, "spec.podTemplate.metadata")
    annotations = _mapping(metadata.get("annotations"), "spec.podTemplate.metadata.annotations")
    for key in annotations:
        if _confines(str(key)):
            yield f"spec.podTemplate.metadata.annotations[{key!r}] is refused ({_CONFINEMENT})"
    pod = _mapping(template.get("spec"), "spec.podTemplate.spec")
    yield from _unknown(pod, _POD_SPEC_KEYS, "spec.podTemplate.spec")
    volumes = pod.get("volumes", [])
    if not isinstance(volumes, list):
        raise SpecError(f"spec.podTemplate.spec.volumes must be a list, got {volumes!r}")
    yield from _volume_problems(volumes, "spec.podTemplate.spec.volumes")
    containers = pod.get("containers", [])
    if not isinstance(containers, list):
        raise SpecError(f"spec.podTemplate.spec.containers must be a list, got {containers!r}")
    named: dict[str, int] = {}
    for index, item in enumerate(containers):
        where = f"spec.podTemplate.spec.containers[{index}]"
        container = _mapping(item, where)
        name = container.get("name")
        # Under any policy: which of two containers of one name would get the operator's settings?
        if isinstance(name, str) and name in named:
            raise SpecError(
                f"{where} is named {name!r} like spec.podTemplate.spec.containers[{named[name]}]: "
                "a pod's containers need distinct names"
            )
        if isinstance(name, str):
            named[name] = index
        for entry_index, entry in enumerate(container.get("env") or []):
            # Under any policy: these set Spark conf the operator sets itself (the app id, the image).
            if isinstance(entry, Mapping) and entry.get("name") in LAUNCH_ENVIRONMENT:
                raise SpecError(
                    f"{where}.env[{entry_index}] sets {entry['name']}, which hands the JVM and Spark "
                    "options past spec.sparkConf's checks: give Spark settings in spec.sparkConf"
                )
        if name not in _CONTAINER_NAMES:
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


def check_own_service_account(names: JobNames, owners: list[dict[str, str]] | None) -> None:
    """The account the operator makes for the job's driver, `<job>-lockgate`, is the
    job's (`owners`: that account's owner references, None if it does not exist yet):
    one of that name that belongs to nobody or to something else (an account the
    namespace's manager made, with a cloud identity or rights; the operator's own)
    would be merged into the job's, and the job's code would run with its identity
    and take it with it when deleted. Under any policy."""
    if owners is None or any(o["kind"] == "StreamingJob" and o["name"] == names.name for o in owners):
        return  # none yet, or this job's (or an earlier job's of this name, being deleted)
    raise SpecError(
        f"ServiceAccount {names.service_account} exists in namespace {names.namespace} and is not this "
        "job's: the operator makes that account for the job's driver, and the job would run with the "
        "identity and rights of the one there; rename the job, or have whoever manages the namespace "
        "rename that account (or name it in spec.serviceAccountName once marked for StreamingJobs)"
    )


def check_namespace(namespace: str, labels: Mapping[str, str] | None, policy: JobPolicy) -> None:
    """The job's namespace (`labels`: its labels, None if it cannot be read as
    existing) enforces Pod Security "restricted", unless the operator allows others."""
    if policy.allow_unrestricted_namespaces:
        return
    enforced = (labels or {}).get(POD_SECURITY_LABEL)
    if enforced == POD_SECURITY_RESTRICTED:
        return
    found = "not set" if enforced is None else f"{enforced!r}"
    raise NamespaceNotRestrictedError(
        f'namespace {namespace} does not enforce Pod Security "restricted" (its label '
        f"{POD_SECURITY_LABEL} is {found}): a job's driver may create pods, and only that label keeps "
        f"them restricted. Whoever manages the namespace sets it with `kubectl label namespace "
        f"{namespace} {POD_SECURITY_LABEL}={POD_SECURITY_RESTRICTED}` (the job then starts without a "
        f"change), or a cluster admin allows such namespaces with the operator's "
        f"{UNRESTRICTED_NAMESPACES_OPTION}"
    )
