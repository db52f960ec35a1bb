"""kmock's KubernetesEmulator with the API server's bookkeeping the operator relies
on — the one stand-in of the suite: no API server can be installed here."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import jsonpatch
import kmock

VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}
RESOURCES = {
    "lockgate.dev/v1alpha1/streamingjobs": ("StreamingJob", True, {"status", "scale"}),
    "v1/pods": ("Pod", True, {"status"}),
    "v1/services": ("Service", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/serviceaccounts": ("ServiceAccount", True, set()),
    "v1/events": ("Event", True, set()),
    "v1/namespaces": ("Namespace", False, set()),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True, set()),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, set()),
    "kopf.dev/v1/clusterkopfpeerings": ("ClusterKopfPeering", False, {"status"}),
}


def _changes_spec(data: Any) -> bool:
    if isinstance(data, dict):  # a merge patch
        return "spec" in data
    return isinstance(data, list) and any(str(op.get("path", "")).startswith("/spec") for op in data)


class VersionedEmulator(kmock.KubernetesEmulator):
    """The emulator with what the API server assigns: the namespace of the URL,
    a uid and generation 1 on create, the generation bumped by every change of the spec (through the
    object or its scale subresource, not its status); a resourceVersion bumped
    by every write, a list reporting the latest, a watch from a version
    replaying nothing older; a JSON patch whose `test` fails gets 422."""

    _latest = 1

    def _next_version(self) -> str:
        VersionedEmulator._latest += 1
        return str(VersionedEmulator._latest)

    def _generation(self, request: kmock.Request) -> int:
        try:
            stored = self.objects[request.resource, request.namespace, request.name]
        except KeyError:
            return 0
        return int(stored.raw.get("metadata", {}).get("generation", 0))

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if request.resource is not None and request.action == kmock.action.CREATE and isinstance(data, dict):
            metadata = data.setdefault("metadata", {})
            metadata["resourceVersion"] = self._next_version()
            if request.namespace is not None:  # created through the namespace's URL
                metadata.setdefault("namespace", request.namespace)
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("generation", 1)
        elif request.resource is not None and request.action == kmock.action.UPDATE:
            bump = request.subresource != "status" and _changes_spec(data)
            if isinstance(data, list):  # a JSON patch
                data.append({"op": "add", "path": "/metadata/resourceVersion", "value": self._next_version()})
                if bump:
                    generation = self._generation(request) + 1
                    data.append({"op": "add", "path": "/metadata/generation", "value": generation})
            elif isinstance(data, dict):
                metadata = data.setdefault("metadata", {})
                metadata["resourceVersion"] = self._next_version()
                if bump:
                    metadata["generation"] = self._generation(request) + 1
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as error:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from error

    async def _serve_list(self, request: kmock.Request) -> Any:
        listing = await super()._serve_list(request)
        listing["metadata"]["resourceVersion"] = str(VersionedEmulator._latest)
        return listing

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        since = int(request.params.get("resourceVersion") or 0)
        async for event in super()._serve_watch(request):
            version = (
                event.get("object", {}).get("metadata", {}).get("resourceVersion")
                if isinstance(event, dict)
                else None
            )
            if version is None or int(version) > since:
                yield event


@contextlib.asynccontextmanager
async def emulated_api_server() -> AsyncIterator[tuple[VersionedEmulator, str]]:
    """The emulator serving over real HTTP, with Lockgate's resources declared; its URL."""
    async with VersionedEmulator() as emulator, kmock.Server(emulator) as server:
        for resource, (kind, namespaced, subresources) in RESOURCES.items():
            emulator.resources[resource] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs=VERBS, subresources=subresources
            )
        yield emulator, str(server.url).rstrip("/")
