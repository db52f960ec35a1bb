"""An in-memory stand-in for the operator's `Kube` (the Kubernetes API is the one
stand-in the tests allow), to run the operator's logic without an API server
or a kopf operator: objects by kind, namespace and name; job statuses as merge
patches leave them, and every patch in order."""

from __future__ import annotations

import json
from typing import Any

from tests.kube_emulator import RESTRICTED
from tests.operator.cluster_helpers import NAMESPACE


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores: the data, not the caller's object."""
    copied: dict[str, Any] = json.loads(json.dumps(obj))
    return copied


def _merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: None removes a field, objects merge, anything else replaces."""
    result = dict(target)
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        elif isinstance(value, dict) and isinstance(result.get(name), dict):
            result[name] = _merged(result[name], value)
        else:
            result[name] = value
    return result


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name)
        self.statuses: dict[tuple[str, str], dict[str, Any]] = {}  # StreamingJobs' (namespace, name)
        self.status_patches: list[dict[str, Any]] = []
        self.service_accounts: dict[tuple[str, str], dict[str, str]] = {}  # their annotations
        # Namespaces' labels: the tests' enforces Pod Security "restricted".
        self.namespaces: dict[str, dict[str, str]] = {NAMESPACE: dict(RESTRICTED)}

    async def create(self, obj: dict[str, Any]) -> bool:
        metadata = obj["metadata"]
        key = (obj["kind"], metadata["namespace"], metadata["name"])
        if key in self.objects:
            return False
        self.objects[key] = _copy(obj)
        return True

    async def apply(self, obj: dict[str, Any]) -> None:
        if not await self.create(obj):
            metadata = obj["metadata"]
            key = (obj["kind"], metadata["namespace"], metadata["name"])
            self.objects[key] = _merged(self.objects[key], _copy(obj))

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.objects.get(("Pod", namespace, name))
        return None if pod is None else _copy(pod)

    async def service_account_annotations(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.service_accounts.get((namespace, name))

    async def service_account_owners(self, namespace: str, name: str) -> list[dict[str, str]] | None:
        account = self.objects.get(("ServiceAccount", namespace, name))
        if account is None:
            return None
        owners = account["metadata"].get("ownerReferences") or []
        return [{"kind": o["kind"], "name": o["name"], "uid": o["uid"]} for o in owners]

    async def namespace_labels(self, name: str) -> dict[str, str] | None:
        labels = self.namespaces.get(name)
        return None if labels is None else dict(labels)

    async def delete_pod(self, namespace: str, name: str) -> None:
        self.objects.pop(("Pod", namespace, name), None)

    async def job_status(self, namespace: str, name: str) -> dict[str, Any] | None:
        status = self.statuses.get((namespace, name))
        return None if status is None else _copy(status)

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        patch = _copy(status)
        self.status_patches.append(patch)
        self.statuses[namespace, name] = _merged(self.statuses.get((namespace, name), {}), patch)

    async def set_pod_phase(self, name: str, phase: str) -> None:
        """What a kubelet reports (in the tests' namespace, as `Kubectl.set_pod_phase`)."""
        pod = self.objects["Pod", NAMESPACE, name]
        pod["status"] = {**pod.get("status", {}), "phase": phase}
