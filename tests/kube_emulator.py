"""kmock's KubernetesEmulator with the API server's bookkeeping the operator and
Spark's Kubernetes client rely on — the one stand-in of the suite: no API server
can be installed here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
import jsonpatch
import kmock

from tests.kube_selectors import SelectorError, object_matcher

VERBS = {"list", "watch", "get", "create", "patch", "update", "delete", "deletecollection"}
RESOURCES = {
    "lockgate.dev/v1alpha1/streamingjobs": ("StreamingJob", True, {"status", "scale"}),
    "v1/pods": ("Pod", True, {"status"}),
    "v1/persistentvolumeclaims": ("PersistentVolumeClaim", True, set()),
    "v1/services": ("Service", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/secrets": ("Secret", True, set()),
    "v1/serviceaccounts": ("ServiceAccount", True, set()),
    "v1/events": ("Event", True, set()),
    "v1/namespaces": ("Namespace", False, set()),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True, set()),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, set()),
    "kopf.dev/v1/clusterkopfpeerings": ("ClusterKopfPeering", False, {"status"}),
}


@dataclass(frozen=True)
class Call:
    client: str  # its User-Agent
    verb: str
    resource: str  # plural[/subresource]


def _changes_spec(data: Any) -> bool:
    if isinstance(data, dict):  # a merge patch
        return "spec" in data
    return isinstance(data, list) and any(str(op.get("path", "")).startswith("/spec") for op in data)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class VersionedEmulator(kmock.KubernetesEmulator):
    """The emulator with what the API server assigns: the namespace of the URL,
    a name from `generateName` (kopf's Events ask for one), a uid, a creationTimestamp and generation 1 on create (a pod Pending, a Secret's
    `stringData` stored base64-encoded in `data`), the
    generation bumped by every change of the spec (through the object or its
    scale subresource, not its status); a resourceVersion bumped by every write
    and deletion, a list reporting the latest, a watch from a version replaying
    nothing older; a JSON patch whose `test` fails gets 422. List, watch and
    deletion of a collection filter by `labelSelector` and `fieldSelector`; the
    garbage collector deletes every object whose owners (by `ownerReferences`
    uid) are all gone, as the API server's background propagation does."""

    _latest = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: set[Call] = set()
        """Every (client, verb, resource) asked for: what a client's RBAC must grant."""
        self.authorized: Callable[[Call], bool] = lambda _: True
        """RBAC as the API server's authorizer applies it: a call it refuses gets 403."""
        self.refused: set[Call] = set()

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
        namespace = _namespace_read(request)
        call = self._note_call(request) if namespace is None else self._note_namespace_read(request)
        if call is not None and not self.authorized(call):
            self.refused.add(call)
            message = f"{call.client} cannot {call.verb} resource {call.resource!r}"
            return aiohttp.web.json_response(_status(403, "Forbidden", message), status=403)
        if namespace is not None:
            return self._serve_namespace(namespace)
        if request.resource is not None and request.method == kmock.method.DELETE and request.name is None:
            return await self._delete_collection(request)
        raw = request._raw_request
        if (
            request.action == kmock.action.WATCH
            and raw is not None
            and raw.headers.get("Upgrade") == "websocket"
        ):
            return await self._serve_websocket_watch(request, raw)
        self._assign(request)
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as error:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from error
        finally:
            if request.resource is not None and request.action in (kmock.action.UPDATE, kmock.action.DELETE):
                await self._collect_garbage()

    def _note_call(self, request: kmock.Request) -> Call | None:
        raw = request._raw_request
        if request.resource is None or request.resource.plural is None or raw is None:
            return None  # discovery: every authenticated client may read it
        resource = (
            f"{request.resource.plural}/{request.subresource}"
            if request.subresource
            else str(request.resource.plural)
        )
        call = Call(raw.headers.get("User-Agent", ""), _verb(request), resource)
        self.calls.add(call)
        return call

    def _note_namespace_read(self, request: kmock.Request) -> Call:
        raw = request._raw_request
        call = Call(raw.headers.get("User-Agent", "") if raw is not None else "", "get", "namespaces")
        self.calls.add(call)
        return call

    def _serve_namespace(self, name: str) -> aiohttp.web.StreamResponse:
        key = (NAMESPACES, None, name)
        if key not in self.objects or self.objects[key].deleted:  # ObjectsArray has no get()
            message = f'namespaces "{name}" not found'
            return aiohttp.web.json_response(_status(404, "NotFound", message), status=404)
        return aiohttp.web.json_response(self.objects[key].raw)

    def _assign(self, request: kmock.Request) -> None:
        data = request.data
        if request.resource is not None and request.action == kmock.action.CREATE and isinstance(data, dict):
            metadata = data.setdefault("metadata", {})
            metadata["resourceVersion"] = self._next_version()
            if "name" not in metadata and "generateName" in metadata:
                metadata["name"] = f"{metadata['generateName']}{uuid.uuid4().hex[:5]}"
            if request.namespace is not None:  # created through the namespace's URL
                metadata.setdefault("namespace", request.namespace)
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("generation", 1)
            metadata.setdefault("creationTimestamp", _now())
            if request.resource.plural == "pods":
                data["status"] = {"phase": "Pending", **(data.get("status") or {})}
            if request.resource.plural == "secrets" and "stringData" in data:
                # A write-only field: the API server stores it in `data`, base64-encoded.
                plain = data.pop("stringData") or {}
                encoded = {
                    key: base64.b64encode(str(value).encode()).decode() for key, value in plain.items()
                }
                data["data"] = {**(data.get("data") or {}), **encoded}
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
        elif request.resource is not None and request.action == kmock.action.DELETE and request.name:
            with contextlib.suppress(KeyError):
                stored = self.objects[request.resource, request.namespace, request.name]
                if not stored.deleted:  # a deletion is a write: watchers see it
                    stored.patch({"metadata": {"resourceVersion": self._next_version()}})

    async def _delete(self, key: Any) -> dict[str, Any]:
        """Delete one stored object as a DELETE of its URL does (under the lock)."""
        stored = self.objects[key]
        metadata = stored.get("metadata", {})
        if metadata.get("deletionTimestamp"):
            return dict(stored.raw)  # already on its way out
        version = self._next_version()
        if metadata.get("finalizers"):
            stored.patch({"metadata": {"deletionTimestamp": _now(), "resourceVersion": version}})
            raw = dict(stored.raw)
            await self._buses[key[0]].put({"type": "MODIFIED", "object": raw})
        else:
            stored.patch({"metadata": {"resourceVersion": version}})
            raw = dict(stored.raw)
            stored.delete()
            await self._buses[key[0]].put({"type": "DELETED", "object": raw})
        return raw

    async def _delete_collection(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        try:
            matches = object_matcher(request.params)
        except SelectorError as error:
            return aiohttp.web.json_response(_status(400, "BadRequest", str(error)), status=400)
        async with self._lock:
            keys = [
                key
                for key, stored in self.objects.items()
                if key[0] == request.resource
                and (request.namespace is None or key[1] == request.namespace)
                and not stored.deleted
                and matches(stored.raw)
            ]
            deleted = [await self._delete(key) for key in keys]
        await self._collect_garbage()
        resource = request.resource
        assert resource is not None  # a collection's URL names its resource
        group_version = f"{resource.group}/{resource.version}".lstrip("/")
        kind = RESOURCES[f"{group_version}/{resource.plural}"][0]
        listing = {"apiVersion": group_version, "kind": f"{kind}List", "items": deleted}
        return aiohttp.web.json_response({**listing, "metadata": {"resourceVersion": str(self._latest)}})

    async def _collect_garbage(self) -> None:
        """Delete the dependents of vanished owners, until none is left (dependents of dependents)."""
        async with self._lock:
            while True:
                live = {stored.raw.get("metadata", {}).get("uid") for _, stored in self._live()}
                orphans = [
                    key
                    for key, stored in self._live()
                    if (owners := stored.raw.get("metadata", {}).get("ownerReferences"))
                    and not stored.raw["metadata"].get("deletionTimestamp")
                    and all(owner.get("uid") not in live for owner in owners)
                ]
                if not orphans:
                    return
                for key in orphans:
                    await self._delete(key)

    def _live(self) -> list[tuple[Any, Any]]:
        return [(key, stored) for key, stored in self.objects.items() if not stored.deleted]

    async def _serve_list(self, request: kmock.Request) -> Any:
        listing: Any = await super()._serve_list(request)
        try:
            matches = object_matcher(request.params)
        except SelectorError as error:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(error)) from error
        listing["items"] = [item for item in listing["items"] if matches(item)]
        listing["metadata"]["resourceVersion"] = str(VersionedEmulator._latest)
        return listing

    async def _serve_websocket_watch(
        self, request: kmock.Request, raw: aiohttp.web.BaseRequest
    ) -> aiohttp.web.StreamResponse:
        """A watch over a WebSocket, one event a text message, as the API server offers
        it (fabric8, the Kubernetes client inside Spark, asks for this first)."""
        socket = aiohttp.web.WebSocketResponse()
        await socket.prepare(raw)

        async def stream() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):  # the client went away
                async for event in self._serve_watch(request):
                    if isinstance(event, dict):
                        await socket.send_str(json.dumps(event))
            await socket.close()  # the watch ended: so does the socket

        sender = asyncio.create_task(stream(), name="websocket-watch")
        try:
            async for _ in socket:  # reading answers the client's close at once
                pass
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        return socket

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        since = int(request.params.get("resourceVersion") or 0)
        matches = object_matcher(request.params)
        async for event in super()._serve_watch(request):
            if not isinstance(event, dict):
                yield event
                continue
            obj = event.get("object", {})
            version = obj.get("metadata", {}).get("resourceVersion")
            if (version is None or int(version) > since) and matches(obj):
                yield event


NAMESPACES = kmock.resource(group="", version="v1", plural="namespaces")
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def _namespace_read(request: kmock.Request) -> str | None:
    """The name of the Namespace a `GET /api/v1/namespaces/NAME` reads (kmock takes that
    path for the namespace of no resource), else None."""
    resource = request.resource
    if (
        resource is not None
        and (resource.group, resource.version, resource.plural) == ("", "v1", None)
        and request.namespace is not None
        and request.name is None
        and request.method == kmock.method.GET
        and request.action is not kmock.action.WATCH
    ):
        return request.namespace
    return None


def add_namespace(emulator: kmock.KubernetesEmulator, name: str, labels: dict[str, str]) -> None:
    """Namespace `name` with `labels` (only those), as an admin's `kubectl create namespace`
    and `kubectl label` leave it (kmock cannot take the POST of a cluster-scoped object
    at /api/v1/namespaces)."""
    metadata = {"name": name, "labels": labels, "resourceVersion": "1", "uid": str(uuid.uuid4())}
    emulator.objects["v1/namespaces", None, name] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata,
    }


def _verb(request: kmock.Request) -> str:
    """The RBAC verb of a request, as the API server's authorizer names it."""
    if request.action == kmock.action.WATCH:
        return "watch"
    if request.method == kmock.method.GET:
        return "get" if request.name is not None else "list"
    if request.method == kmock.method.DELETE:
        return "delete" if request.name is not None else "deletecollection"
    verbs = {kmock.method.POST: "create", kmock.method.PUT: "update", kmock.method.PATCH: "patch"}
    return verbs.get(request.method, str(request.method.value).lower())


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@contextlib.asynccontextmanager
async def emulated_api_server() -> AsyncIterator[tuple[VersionedEmulator, str]]:
    """The emulator serving over real HTTP, with Lockgate's resources declared; its URL."""
    async with VersionedEmulator() as emulator, kmock.Server(emulator) as server:
        for resource, (kind, namespaced, subresources) in RESOURCES.items():
            emulator.resources[resource] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs=VERBS, subresources=subresources
            )
        yield emulator, str(server.url).rstrip("/")
