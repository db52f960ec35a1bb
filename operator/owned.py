"""The objects a job owns besides its driver pod: the job's ConfigMap, the
driver's headless Service, and the RBAC that lets the driver manage its
executor pods (nothing more: least privilege)."""

from __future__ import annotations

import base64
from typing import Any

import yaml
from lockgate.operator.driver_pod import (
    BLOCK_MANAGER_PORT,
    CONTAINER_SECURITY,
    DRIVER_CONTAINER,
    DRIVER_PORT,
    ETCD_PASSWORD_KEY,
    EXECUTOR_CONTAINER,
    EXECUTOR_TEMPLATE_FILE,
    MANIFEST_FILE,
    METRICS_PORT_NAME,
    PINNED_LAUNCH_ENVIRONMENT,
    POD_SECURITY,
    SNAPSHOT_KEY_FILE,
    TASK_METRICS_PORT,
    Cluster,
)
from lockgate.operator.naming import API_VERSION, KIND, JobNames
from lockgate.operator.spec import image_of, parse_spec
from lockgate.runtime.snapshot.snapshot_key import new_key_text


def _owned(api_version: str, kind: str, names: JobNames, name: str, component: str) -> dict[str, Any]:
    """An object of the job's, in its namespace, with its labels (each object goes on from here)."""
    metadata = {"name": name, "namespace": names.namespace, "labels": names.labels(component)}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def config_map(names: JobNames, spec: dict[str, Any], cluster: Cluster) -> dict[str, Any]:
    """The StreamingJob as a manifest the driver reads (`lockgate run` takes the same
    file), and the executor pod template when the spec has one."""
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": names.name, "namespace": names.namespace},
        "spec": spec,
    }
    return {
        **_owned("v1", "ConfigMap", names, names.config_map, "config"),
        "data": {
            MANIFEST_FILE: yaml.safe_dump(manifest, sort_keys=False),
            EXECUTOR_TEMPLATE_FILE: yaml.safe_dump(executor_pod_template(spec, cluster), sort_keys=False),
        },
    }


def executor_pod_template(spec: dict[str, Any], cluster: Cluster) -> dict[str, Any]:
    """What Spark merges into every executor pod: `spec.podTemplate`'s overrides (its
    container named `executor` merged into the executor's, one named `driver` left
    to the driver), the executor container's metrics port (each executor runs one
    task), etcd's TLS files where the driver has them (tasks connect to etcd with the
    driver's paths), and `spec.volumes` at the driver's mount paths."""
    template = dict(spec.get("podTemplate") or {})
    pod_spec = dict(template.get("spec") or {})
    containers = [dict(c) for c in pod_spec.get("containers") or [] if c.get("name") != DRIVER_CONTAINER]
    executor = next((c for c in containers if c.get("name") == EXECUTOR_CONTAINER), None)
    if executor is None:
        executor = {"name": EXECUTOR_CONTAINER}
        containers.insert(0, executor)
    executor.setdefault("securityContext", CONTAINER_SECURITY)
    jvm_options = [e for e in PINNED_LAUNCH_ENVIRONMENT if e["name"] != "SPARK_CONF_DIR"]
    executor["env"] = [*(executor.get("env") or []), *jvm_options]
    ports = list(executor.get("ports") or [])
    if not any(port.get("name") == METRICS_PORT_NAME for port in ports):
        ports.append({"name": METRICS_PORT_NAME, "containerPort": TASK_METRICS_PORT})
    executor["ports"] = ports
    mounts = [*cluster.pod_mounts(), *(spec.get("volumeMounts") or [])]
    executor["volumeMounts"] = [*(executor.get("volumeMounts") or []), *mounts]
    volumes = [*cluster.pod_volumes(), *(spec.get("volumes") or [])]
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), *volumes]
    pod_spec = {"securityContext": POD_SECURITY, **pod_spec, "containers": containers}
    return {"apiVersion": "v1", "kind": "Pod", **template, "spec": pod_spec}


def snapshot_key_secret(names: JobNames) -> dict[str, Any]:
    """The job's snapshot key, made once with its first launch and kept for its life
    (never rewritten: its checkpoints and savepoints are signed with it); it goes
    with the job. Only the driver mounts it: it signs and checks `_metadata`."""
    return {
        **_owned("v1", "Secret", names, names.snapshot_key, "driver"),
        "type": "Opaque",
        "stringData": {SNAPSHOT_KEY_FILE: new_key_text()},
    }


def etcd_credentials_secret(names: JobNames, password: str) -> dict[str, Any]:
    """The password of the job's own etcd user for one launch; only the driver
    reads it (its executors get it with their tasks, over Spark's authenticated,
    encrypted RPC)."""
    return {
        **_owned("v1", "Secret", names, names.etcd_credentials, "driver"),
        "type": "Opaque",
        "data": {ETCD_PASSWORD_KEY: base64.b64encode(password.encode()).decode()},
    }


def driver_service(names: JobNames) -> dict[str, Any]:
    """Headless: executors resolve the driver's pod address by the Service's name.
    Only what executors connect to: the Spark UI (which can kill stages) is reached
    with `kubectl port-forward` to the driver pod, by those allowed to."""
    ports = {"driver-rpc": DRIVER_PORT, "blockmanager": BLOCK_MANAGER_PORT}
    return {
        **_owned("v1", "Service", names, names.service, "driver"),
        "spec": {
            "clusterIP": "None",
            "selector": {"lockgate.dev/job": names.name, "app.kubernetes.io/component": "driver"},
            "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports.items()],
            # Executors connect while the driver starts, before it is Ready.
            "publishNotReadyAddresses": True,
        },
    }


IMAGE_ANNOTATION = "lockgate.dev/image"
"""On the driver's ServiceAccount: the one image the chart's admission policy
(helm/lockgate/templates/job-pod-policy.yaml) lets the driver create pods with."""


def service_account(names: JobNames, image: str) -> dict[str, Any]:
    account = _owned("v1", "ServiceAccount", names, names.service_account, "driver")
    account["metadata"]["annotations"] = {IMAGE_ANNOTATION: image}
    return account


def role(names: JobNames) -> dict[str, Any]:
    """What Spark's driver does in client mode, and nothing more: create, watch and
    delete its executor pods, and create the ConfigMap it mounts into them. Spark
    also tries, when it stops, to delete by label every pod, ConfigMap, Service and
    claim of its application; that needs `deletecollection`, which would let the
    job delete every such object of its namespace, so it is not granted: Spark logs
    the refusal and goes on, and the executor pods and the ConfigMap, owned by the
    driver pod, go with it."""
    return {
        **_owned("rbac.authorization.k8s.io/v1", "Role", names, names.role, "driver"),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete"]},
        ],
    }


def role_binding(names: JobNames) -> dict[str, Any]:
    return {
        **_owned("rbac.authorization.k8s.io/v1", "RoleBinding", names, names.role, "driver"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.role},
        "subjects": [{"kind": "ServiceAccount", "name": names.service_account, "namespace": names.namespace}],
    }


def owned_objects(
    names: JobNames, spec: dict[str, Any], cluster: Cluster, own_service_account: bool
) -> list[dict[str, Any]]:
    """Everything but the driver pod, in the order they must exist."""
    objects = [config_map(names, spec, cluster), driver_service(names)]
    if own_service_account:
        objects += [service_account(names, image_of(parse_spec(spec))), role(names), role_binding(names)]
    return objects
