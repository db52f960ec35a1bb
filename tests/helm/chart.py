"""Rendering the chart with Helm's own Go code (helm-python-sdk), as `helm template` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "lockgate"
NAMESPACE = "lockgate-system"

NON_DEFAULT: dict[str, Any] = {
    "operator": {
        "replicas": 2,
        "watchNamespaces": ["streams", "batch"],
        "checkpointStorage": "s3://b/lockgate",
        "allowPrivilegedPods": True,
        "allowCustomStorageRoots": True,
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


def render(values: dict[str, Any] | None = None, *, release: str = "lockgate") -> list[dict[str, Any]]:
    """Every object the chart renders (the CRDs in crds/ not included)."""
    manifests = helm.Chart.load(CHART).render(values, name=release, namespace=NAMESPACE, is_install=True)
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
