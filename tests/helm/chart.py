"""Rendering the chart with Helm's own Go code (helm-python-sdk), as `helm template` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "lockgate"
NAMESPACE = "lockgate-system"
RELEASE = "lockgate"

NON_DEFAULT: dict[str, Any] = {
    "operator": {
        "replicas": 2,
        "watchNamespaces": ["streams", "batch"],
        "checkpointStorage": "s3://b/lockgate",
        "allowPrivilegedPods": True,
        "allowCustomStorageRoots": True,
        "env": [{"name": "AWS_ENDPOINT_URL", "value": "https://s3.example"}],
        "envFrom": [{"secretRef": {"name": "lockgate-storage"}}],
        "volumes": [{"name": "gcs-key", "secret": {"secretName": "gcs-key"}}],
        "volumeMounts": [{"name": "gcs-key", "mountPath": "/var/run/gcs", "readOnly": True}],
    },
    "jobPodPolicy": {"enabled": False},  # refused beside allowPrivilegedPods
    "etcd": {
        "bundled": {"enabled": False},
        "endpoints": ["https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"],
        "tls": {"secretName": "etcd-client"},
        "auth": {"user": "root", "passwordSecret": "etcd-root"},
    },
    "monitoring": {
        "podMonitors": True,
        "prometheusRules": True,
        "labels": {"release": "kube-prometheus-stack"},
    },
}


# The one value an install must give: the chart has no storage root of its own.
STORAGE_ROOT = "s3://lockgate-demo/lockgate"


def installable(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """`values` with the storage root, unless they name one (or let jobs name theirs)."""
    values = dict(values or {})
    operator = dict(values.get("operator") or {})
    if not operator.get("allowCustomStorageRoots"):
        operator.setdefault("checkpointStorage", STORAGE_ROOT)
    return {**values, "operator": operator}


def render_files(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, str]:
    """What `helm install --dry-run` renders for `values` as given: each template's text, NOTES.txt too."""
    rendered: dict[str, str] = helm.Chart.load(CHART).render(
        values, name=release, namespace=namespace, is_install=True
    )
    return rendered


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE) -> list[dict[str, Any]]:
    """Every object the chart renders for `values` and the storage root (the CRDs in crds/ not included)."""
    manifests = render_files(installable(values), release=release)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            objects += [o for o in yaml.safe_load_all(text) if o]
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def operator_args(objects: list[dict[str, Any]]) -> list[str]:
    deployment = find(objects, "Deployment")[0]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args
