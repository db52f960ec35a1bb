"""The driver Pod of one launch of a job: `spark-submit` in client mode against the
Kubernetes API, executors owned by the driver pod (they go when it goes).

Every value the operator decides — parallelism, max parallelism, where to
restore from, storage — is an explicit flag, so `kubectl get pod -o yaml` shows
what runs; the job's own settings come from the StreamingJob manifest in the job's
ConfigMap, mounted at /etc/lockgate, which the driver resolves with the same model
as `lockgate run job.yaml` does (no second projection of the spec into flags).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lockgate.operator.naming import JobNames
from lockgate.operator.spec import Resources, SpecError, StreamingJobSpec, image_of
from lockgate.operator.upgrade_plan import Restore
from lockgate.runtime.coordination.etcd_options import PASSWORD_ENV as ETCD_PASSWORD_ENV
from lockgate.runtime.coordination.job_identity import JobIdentity
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.leadership import LEASE_TTL_S
from lockgate.runtime.spec.durations import format_duration
from lockgate.runtime.spec.model import amount_of

CONFIG_DIR = "/etc/lockgate"
ETCD_TLS_DIR, ETCD_TLS_VOLUME = "/etc/lockgate-etcd-tls", "etcd-tls"  # same path in driver and executors
ETCD_PASSWORD_KEY = "password"  # in the job's etcd credentials Secret
SNAPSHOT_KEY_DIR, SNAPSHOT_KEY_VOLUME, SNAPSHOT_KEY_FILE = "/etc/lockgate-snapshot-key", "snapshot-key", "key"
MANIFEST_FILE = "job.yaml"
EXECUTOR_TEMPLATE_FILE = "executor-pod-template.yaml"  # Spark merges its executor pods into it
EXECUTOR_CONTAINER = "executor"  # the template's container Spark fills in
# What the JVM and Spark's launch scripts read from the environment: any of them
# sets Spark conf keys and JVM system properties past the checks of spec.sparkConf
# (`-Dspark.app.id=…` in JAVA_TOOL_OPTIONS). Refused in a container's env, and set
# empty by the operator after it, which a Secret or ConfigMap in envFrom cannot
# override (a container's env wins over its envFrom).
LAUNCH_ENVIRONMENT = (
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "SPARK_SUBMIT_OPTS",
    "SPARK_JAVA_OPTS",
    "SPARK_CONF_DIR",
)
PINNED_LAUNCH_ENVIRONMENT = tuple({"name": name, "value": ""} for name in LAUNCH_ENVIRONMENT)
DRIVER_CONTAINER = "driver"  # the template's container merged into the driver's
DRIVER_PORT, BLOCK_MANAGER_PORT, UI_PORT = 7078, 7079, 4040
# Prometheus ports, both named METRICS_PORT_NAME: the driver's and each executor's one task's.
DRIVER_METRICS_PORT, TASK_METRICS_PORT, METRICS_PORT_NAME = 9249, 9250, "metrics"
API_SERVER = "k8s://https://kubernetes.default.svc"
# A driver replacing a killed one waits for the dead one's coordinator record to go
# (its lease expired, or its heartbeat stood still for LEASE_TTL_S while another etcd
# user keeps the lease alive) instead of failing on it; the margin covers etcd's
# expiry sweep on a busy node.
TAKEOVER_WAIT_S = 2 * LEASE_TTL_S
# spark-submit options the operator derives from the spec; a sparkConf entry may not override them.
OWNED_CONF_PREFIXES = (
    "spark.executor.instances",
    "spark.executor.cores",
    "spark.kubernetes.namespace",
    "spark.kubernetes.container.image",  # and its .pullPolicy, .pullSecrets
    "spark.kubernetes.driver.container.image",
    "spark.kubernetes.executor.container.image",
    "spark.kubernetes.driver.pod.name",
    "spark.kubernetes.executor.podNamePrefix",
    "spark.kubernetes.executor.label.",
    "spark.kubernetes.executor.podTemplate",
    "spark.driver.host",
    "spark.driver.port",
    "spark.driver.blockManager.port",
    "spark.dynamicAllocation.enabled",
    "spark.authenticate",
    "spark.network.crypto.",
)

# Pod Security "restricted", with the image's fixed non-root user: what every driver and
# executor pod runs with unless the operator allows privileged pods and the spec's
# podTemplate says otherwise.
IMAGE_USER = 10001
POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": IMAGE_USER,
    "runAsGroup": IMAGE_USER,
    "fsGroup": IMAGE_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
# The root filesystem is read-only: Spark, the JVM and Lockgate write under /tmp (the
# driver's --work-dir, Spark's local dirs) and the user's home, each an emptyDir.
WRITABLE_DIRS = {"lockgate-tmp": "/tmp", "lockgate-home": "/home/lockgate"}


@dataclass(frozen=True)
class Launch:
    """One start of the job's driver: its number and what state it starts from."""

    number: int
    max_parallelism: int
    restore: Restore
    savepoint: str | None = None  # with restore == "savepoint"
    import_unsigned: bool = False  # the savepoint is spec.job.importUnsignedSavepoint, vouched for

    def __post_init__(self) -> None:
        if (self.restore == "savepoint") != (self.savepoint is not None):
            raise ValueError("a savepoint path goes with restore='savepoint', and only with it")
        if self.import_unsigned and self.restore != "savepoint":
            raise ValueError("importing an unsigned savepoint goes with restore='savepoint'")


@dataclass(frozen=True)
class Cluster:
    """What the operator knows beyond the spec: etcd and default storage."""

    etcd_endpoints: str
    checkpoint_storage: str | None = None
    etcd_tls_secret: str | None = None
    """A Secret (ca.crt, tls.crt, tls.key) in each job's namespace that drivers and
    executors mount to reach etcd over TLS; None: etcd without TLS."""
    etcd_job_users: bool = False
    """Each job reaches etcd as its own user, whose role covers only its keys (the
    operator connects as a user with etcd's root role); False: etcd without auth,
    where every job could write every other job's keys."""

    def etcd_user_of(self, names: JobNames, spec: StreamingJobSpec) -> str | None:
        """The job's own etcd user; None where it has none (no etcd auth, or an etcd of
        the job's own, `spec.etcdEndpoints`, on which the operator makes no users)."""
        if not self.etcd_job_users or spec.etcd_endpoints:
            return None
        return JobIdentity(JobKeys(names.namespace, names.name)).name

    def etcd_password_env(self, names: JobNames, spec: StreamingJobSpec) -> list[dict[str, Any]]:
        if self.etcd_user_of(names, spec) is None:
            return []
        secret = {"name": names.etcd_credentials, "key": ETCD_PASSWORD_KEY}
        return [{"name": ETCD_PASSWORD_ENV, "valueFrom": {"secretKeyRef": secret}}]

    def pod_volumes(self) -> list[dict[str, Any]]:
        """What the driver and every executor mount: the writable directories, and
        etcd's TLS files where there are some."""
        volumes: list[dict[str, Any]] = [{"name": name, "emptyDir": {}} for name in WRITABLE_DIRS]
        if self.etcd_tls_secret is not None:
            volumes.append({"name": ETCD_TLS_VOLUME, "secret": {"secretName": self.etcd_tls_secret}})
        return volumes

    def pod_mounts(self) -> list[dict[str, Any]]:
        """Where `pod_volumes` are mounted."""
        mounts: list[dict[str, Any]] = [
            {"name": name, "mountPath": path} for name, path in WRITABLE_DIRS.items()
        ]
        if self.etcd_tls_secret is not None:
            mounts.append({"name": ETCD_TLS_VOLUME, "mountPath": ETCD_TLS_DIR, "readOnly": True})
        return mounts


# Spark refuses an executor with less: it reserves 300 MiB and needs 1.5 times that.
MIN_EXECUTOR_MEMORY = 450 * 2**20
_SPARK_UNITS = (("t", 2**40), ("g", 2**30), ("m", 2**20), ("k", 2**10))


def spark_memory(quantity: str, where: str) -> str:
    """A Kubernetes memory quantity (`2Gi`, `1.5Gi`, `2G`) as Spark's size string,
    exactly (`2g`, `1536m`, `1953125k`); a part of a KiB is rounded up."""
    size = math.ceil(amount_of(quantity))  # a valid quantity: the spec's model checked it
    if size < MIN_EXECUTOR_MEMORY:
        raise SpecError(f"{where}: {quantity} is less than the 450Mi Spark needs for an executor")
    kib = -(-size // 2**10)
    unit, per = next((u, n) for u, n in _SPARK_UNITS if (kib * 2**10) % n == 0)
    return f"{kib * 2**10 // per}{unit}"


def _executor_conf(resources: Resources) -> dict[str, str]:
    conf = {}
    memory = resources.requests.get("memory") or resources.limits.get("memory")
    if memory is not None:
        conf["spark.executor.memory"] = spark_memory(memory, "spec.executor.resources memory")
    if "cpu" in resources.requests:
        conf["spark.kubernetes.executor.request.cores"] = resources.requests["cpu"]
    if "cpu" in resources.limits:
        conf["spark.kubernetes.executor.limit.cores"] = resources.limits["cpu"]
    return conf


def spark_conf(names: JobNames, spec: StreamingJobSpec, launch: Launch) -> dict[str, str]:
    for key in spec.spark_conf:
        if key.startswith(OWNED_CONF_PREFIXES):
            raise SpecError(f"spec.sparkConf[{key!r}] is set by the operator from the spec; remove it")
    conf = {
        "spark.executor.instances": str(spec.replicas),
        # One slot per executor: a barrier stage of P tasks gets P executor pods.
        "spark.executor.cores": "1",
        "spark.dynamicAllocation.enabled": "false",
        "spark.kubernetes.namespace": names.namespace,
        "spark.kubernetes.container.image": image_of(spec),
        "spark.kubernetes.container.image.pullPolicy": spec.image_pull_policy,
        "spark.kubernetes.driver.pod.name": names.driver_pod(launch.number),
        "spark.kubernetes.executor.podNamePrefix": f"{names.name}-{launch.number}",
        "spark.driver.host": f"{names.service}.{names.namespace}.svc",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        # Driver and executors prove a per-application secret to each other (Spark generates it and
        # hands it to the executor pods) and encrypt their RPC: the task closures carry the job's
        # exchange secret across the pod network.
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        # Executors get no claims of their own (those conf keys are refused): Spark need not list
        # claims to reuse, and the driver's Role grants none.
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
    }
    if spec.service_account_name is not None:
        # Executors upload state too: the account's cloud identity must reach them. Without one named,
        # they keep the namespace's default account: the driver's may manage pods, theirs need not.
        conf["spark.kubernetes.authenticate.executor.serviceAccountName"] = spec.service_account_name
    for key, value in names.labels("executor").items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    conf["spark.kubernetes.executor.podTemplateFile"] = f"{CONFIG_DIR}/{EXECUTOR_TEMPLATE_FILE}"
    conf["spark.kubernetes.executor.podTemplateContainerName"] = EXECUTOR_CONTAINER
    return {**conf, **_executor_conf(spec.executor_resources), **spec.spark_conf}


@dataclass(frozen=True)
class StorageLayout:
    checkpoints: str  # the driver's --checkpoint-dir; the runtime adds a directory named by the job
    savepoints: str


def namespace_root(storage: str, namespace: str) -> str:
    """The directory of `storage` that holds one namespace's jobs."""
    return f"{storage.rstrip('/')}/{namespace}"


def storage_layout(names: JobNames, spec: StreamingJobSpec, cluster: Cluster) -> StorageLayout:
    """Where a job's checkpoints and savepoints go. Checkpoints under
    `<storage>/<namespace>/<name>`, so equal names in two namespaces never share a
    directory; savepoints by default under `<storage>/<namespace>/_savepoints/<name>`
    (`_` is not allowed in a Kubernetes name: no job directory is ever called that)."""
    storage = spec.checkpointing.storage or cluster.checkpoint_storage
    if storage is None:
        raise SpecError(
            "spec.checkpointing.storage is required: the operator has no default checkpoint storage"
        )
    checkpoints = namespace_root(storage, names.namespace)
    return StorageLayout(checkpoints, spec.savepoints.dir or f"{checkpoints}/_savepoints/{names.name}")


def driver_arguments(names: JobNames, spec: StreamingJobSpec, launch: Launch, cluster: Cluster) -> list[str]:
    """The driver's own options (after spark-submit's `--`)."""
    storage = storage_layout(names, spec, cluster)
    flags = [f"{CONFIG_DIR}/{MANIFEST_FILE}", "--namespace", names.namespace, "--job-id", names.name]
    flags += ["--driver-name", names.driver_pod(launch.number)]
    flags += ["--takeover-wait", format_duration(TAKEOVER_WAIT_S)]
    flags += ["--parallelism", str(spec.replicas), "--max-parallelism", str(launch.max_parallelism)]
    flags += ["--checkpoint-dir", storage.checkpoints, "--savepoint-dir", storage.savepoints]
    flags += ["--work-dir", "/tmp/lockgate", "--snapshot-key-file", f"{SNAPSHOT_KEY_DIR}/{SNAPSHOT_KEY_FILE}"]
    flags += ["--metrics-port", str(DRIVER_METRICS_PORT), "--task-metrics-ports", str(TASK_METRICS_PORT)]
    flags += ["--metrics-bind", "0.0.0.0"]  # Prometheus scrapes the pod's address
    if cluster.etcd_tls_secret is not None:
        files = {"--etcd-ca": "ca.crt", "--etcd-cert": "tls.crt", "--etcd-key": "tls.key"}
        flags += [x for flag, name in files.items() for x in (flag, f"{ETCD_TLS_DIR}/{name}")]
    user = cluster.etcd_user_of(names, spec)
    flags += [] if user is None else ["--etcd-user", user]
    if launch.restore == "savepoint":
        flags += ["--from-savepoint", str(launch.savepoint)]
        flags += ["--import-unsigned-savepoint"] if launch.import_unsigned else []
    elif launch.restore == "empty":
        flags += ["--fresh"]
    return flags


def template_container(template: dict[str, Any], name: str) -> dict[str, Any]:
    """The container of `spec.podTemplate` named `name` (driver or executor), or none."""
    spec = template.get("spec")
    containers = (spec.get("containers") if isinstance(spec, dict) else None) or []
    return next((dict(c) for c in containers if isinstance(c, dict) and c.get("name") == name), {})


def driver_pod(names: JobNames, spec: StreamingJobSpec, launch: Launch, cluster: Cluster) -> dict[str, Any]:
    conf = spark_conf(names, spec, launch)
    own = template_container(spec.pod_template, DRIVER_CONTAINER)
    spark_options = ["--master", API_SERVER, "--deploy-mode", "client", "--name", names.name]
    spark_options += [x for key, value in conf.items() for x in ("--conf", f"{key}={value}")]
    container = {
        "name": DRIVER_CONTAINER,
        "image": image_of(spec),
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["python", "-m", "lockgate.runtime.driver.submit"],
        "args": [*spark_options, "--", *driver_arguments(names, spec, launch, cluster)],
        "env": [
            *own.get("env", []),
            {"name": "LOCKGATE_ETCD", "value": spec.etcd_endpoints or cluster.etcd_endpoints},
            *cluster.etcd_password_env(names, spec),  # after the template's: its own cannot override
            *PINNED_LAUNCH_ENVIRONMENT,
        ],
        **({"envFrom": list(own["envFrom"])} if own.get("envFrom") else {}),
        "ports": [
            {"name": "driver-rpc", "containerPort": DRIVER_PORT},
            {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
            {"name": "spark-ui", "containerPort": UI_PORT},
            {"name": METRICS_PORT_NAME, "containerPort": DRIVER_METRICS_PORT},
        ],
        "resources": spec.driver_resources.model_dump(exclude_defaults=True),  # requests, limits if given
        "securityContext": own.get("securityContext", CONTAINER_SECURITY),
        "volumeMounts": [
            {"name": "job", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": SNAPSHOT_KEY_VOLUME, "mountPath": SNAPSHOT_KEY_DIR, "readOnly": True},
            *cluster.pod_mounts(),
            *spec.volume_mounts,
        ],
    }
    template = spec.pod_template
    metadata = template.get("metadata", {}) if isinstance(template.get("metadata"), dict) else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.driver_pod(launch.number),
            "namespace": names.namespace,
            "labels": {**metadata.get("labels", {}), **names.labels("driver")},
            "annotations": {**metadata.get("annotations", {}), "lockgate.dev/launch": str(launch.number)},
        },
        "spec": {
            "securityContext": POD_SECURITY,
            **{k: v for k, v in (template.get("spec") or {}).items() if k not in ("containers", "volumes")},
            "serviceAccountName": spec.service_account_name or names.service_account,
            # The operator relaunches a lost driver (with its own backoff); the job master restarts tasks.
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [
                {"name": "job", "configMap": {"name": names.config_map}},
                {"name": SNAPSHOT_KEY_VOLUME, "secret": {"secretName": names.snapshot_key}},
                *cluster.pod_volumes(),
                *spec.volumes,
            ],
        },
    }
