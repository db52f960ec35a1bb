"""The Kubernetes calls the operator makes beyond kopf's own: the objects it owns
and its job's status, with the official client (run in threads: it is sync)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from lockgate.operator.naming import GROUP, PLURAL, VERSION

MERGE_PATCH = "application/merge-patch+json"
CONFLICT, NOT_FOUND = 409, 404


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._rbac = client.RbacAuthorizationV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        # (create, patch) of each kind the operator owns
        self._calls: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "Pod": (self._core.create_namespaced_pod, self._core.patch_namespaced_pod),
            "ConfigMap": (self._core.create_namespaced_config_map, self._core.patch_namespaced_config_map),
            "Service": (self._core.create_namespaced_service, self._core.patch_namespaced_service),
            "Secret": (self._core.create_namespaced_secret, self._core.patch_namespaced_secret),
            "ServiceAccount": (
                self._core.create_namespaced_service_account,
                self._core.patch_namespaced_service_account,
            ),
            "Role": (self._rbac.create_namespaced_role, self._rbac.patch_namespaced_role),
            "RoleBinding": (
                self._rbac.create_namespaced_role_binding,
                self._rbac.patch_namespaced_role_binding,
            ),
        }

    async def create(self, obj: dict[str, Any]) -> bool:
        """Create `obj`; False when it exists already (a retried step)."""
        create, _ = self._calls[obj["kind"]]
        try:
            await asyncio.to_thread(create, obj["metadata"]["namespace"], obj)
        except client.ApiException as error:
            if error.status == CONFLICT:
                return False
            raise
        return True

    async def apply(self, obj: dict[str, Any]) -> None:
        """Create `obj`, or bring an existing one to it."""
        if not await self.create(obj):
            _, patch = self._calls[obj["kind"]]
            metadata = obj["metadata"]
            await asyncio.to_thread(
                patch, metadata["name"], metadata["namespace"], obj, _content_type=MERGE_PATCH
            )

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = await _unless_not_found(self._core.read_namespaced_pod, name, namespace)
        serialized = self._api.sanitize_for_serialization(pod)  # type: ignore[no-untyped-call]
        return cast(dict[str, Any] | None, serialized)  # None for None

    async def service_account_annotations(self, namespace: str, name: str) -> dict[str, str] | None:
        """The annotations of a ServiceAccount; None if it does not exist."""
        account = await _unless_not_found(self._core.read_namespaced_service_account, name, namespace)
        if account is None:
            return None
        metadata = account.metadata
        return dict((metadata.annotations if metadata is not None else None) or {})

    async def service_account_owners(self, namespace: str, name: str) -> list[dict[str, str]] | None:
        """The owner references (kind, name, uid) of a ServiceAccount; None if it does not exist."""
        account = await _unless_not_found(self._core.read_namespaced_service_account, name, namespace)
        if account is None:
            return None
        metadata = account.metadata
        owners = (metadata.owner_references if metadata is not None else None) or []
        return [{"kind": o.kind, "name": o.name, "uid": o.uid} for o in owners]

    async def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The labels of a namespace; None if it does not exist."""
        namespace = await _unless_not_found(self._core.read_namespace, name)
        if namespace is None:
            return None
        metadata = namespace.metadata
        return dict((metadata.labels if metadata is not None else None) or {})

    async def delete_pod(self, namespace: str, name: str) -> None:
        await _unless_not_found(self._core.delete_namespaced_pod, name, namespace)

    async def job_status(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The StreamingJob's status now; None if the job is gone."""
        job = await _unless_not_found(
            self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
        )
        return None if job is None else cast(dict[str, Any], job.get("status") or {})

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into the StreamingJob's status, now (not when a handler returns)."""
        await _patch_job(
            self._custom.patch_namespaced_custom_object_status, namespace, name, {"status": status}
        )


async def _unless_not_found(call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)` in a thread; None when the object it reads or deletes does not exist."""
    try:
        return await asyncio.to_thread(call, *args)
    except client.ApiException as error:
        if error.status == NOT_FOUND:
            return None
        raise


async def _patch_job(call: Callable[..., Any], namespace: str, name: str, patch: dict[str, Any]) -> None:
    """A merge patch of a StreamingJob, or of its status with `call` the status's patch."""
    await asyncio.to_thread(call, GROUP, VERSION, namespace, PLURAL, name, patch, _content_type=MERGE_PATCH)
