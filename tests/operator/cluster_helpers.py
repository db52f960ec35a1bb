"""Acting on the emulated cluster as kubectl and a driver would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import kmock
import yaml
from kubernetes import client
from lockgate.operator.naming import API_VERSION, GROUP, KIND, PLURAL, VERSION
from lockgate.runtime.coordination.etcd import Etcd
from lockgate.runtime.coordination.job_status import StatusHeartbeat
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.records import (
    RescaleRequest,
    RescaleResult,
    SavepointRequest,
    SavepointResult,
    decode,
    encode,
)

NAMESPACE = "streams"
JOBS = f"{GROUP}/{VERSION}/{PLURAL}"
SPEC: dict[str, Any] = {
    "image": "lockgate:1",
    "job": {"entrypoint": "examples.sums:build", "args": {"keys": "100"}},
    "replicas": 2,
    "maxParallelism": 64,
}


class Kubectl:
    def __init__(self, emulator: kmock.KubernetesEmulator, api: client.ApiClient) -> None:
        self.emulator = emulator
        self.custom = client.CustomObjectsApi(api)

    async def apply(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }
        await asyncio.to_thread(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL, body
        )

    async def patch_spec(self, name: str, changes: dict[str, Any]) -> None:
        """What `kubectl patch --type merge` does (the API server bumps the generation)."""
        patch = {"spec": changes}
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            name,
            patch,
            _content_type="application/merge-patch+json",
        )

    async def patch_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        """`kubectl patch --type merge -p '{"metadata": ...}'`, on a connection of its
        own (see set_pod_phase): it is made while no operator runs."""
        custom = client.CustomObjectsApi(client.ApiClient(self.custom.api_client.configuration))
        await asyncio.to_thread(
            custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            name,
            {"metadata": metadata},
            _content_type="application/merge-patch+json",
        )

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(
            self.custom.delete_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL, name
        )

    def job(self, name: str) -> dict[str, Any]:
        return self.get(JOBS, name)

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.job(name).get("status") or {})

    def exists(self, resource: str, name: str | None) -> bool:
        try:
            return not self.emulator.objects[resource, NAMESPACE, name].deleted
        except KeyError:
            return False

    def get(self, resource: str, name: str | None) -> dict[str, Any]:
        """The stored object as plain JSON data (the emulator keeps its own views of it)."""
        return dict(json.loads(json.dumps(self.emulator.objects[resource, NAMESPACE, name].raw)))

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """The Events of job `name` as `kubectl describe sj` lists them: (type, reason,
        message), oldest first."""
        posted = [
            stored.raw
            for (resource, _, _), stored in self.emulator.objects.items()
            if resource.plural == "events"
            and not stored.deleted
            and stored.raw.get("involvedObject", {}).get("name") == name
        ]
        posted.sort(key=lambda event: int(event["metadata"]["resourceVersion"]))
        return [(event["type"], event["reason"], event["message"]) for event in posted]

    def event_reasons(self, name: str) -> list[str]:
        return [reason for _, reason, _ in self.events(name)]

    async def set_pod_phase(self, name: str, phase: str) -> None:
        # A connection of its own, as a kubelet has: a stopped in-process operator
        # cancels the server's handlers of the connections its lifetime saw.
        core = client.CoreV1Api(client.ApiClient(self.custom.api_client.configuration))
        await asyncio.to_thread(
            core.patch_namespaced_pod_status,
            name,
            NAMESPACE,
            {"status": {"phase": phase}},
            _content_type="application/merge-patch+json",
        )


class Kubelet(Protocol):
    """What reports a pod's phase: `Kubectl` on the emulated cluster, `FakeKube` in unit tests."""

    async def set_pod_phase(self, name: str, phase: str) -> None: ...


_CRD = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "streamingjob.yaml").read_text())


def undeclared_status_fields(status: dict[str, Any]) -> list[str]:
    """The fields of `status` the CRD's schema does not declare where it fixes the
    fields: an API server prunes them, so a status that has them is not what a
    cluster would keep (the emulated one prunes nothing)."""
    (version,) = _CRD["spec"]["versions"]
    return _undeclared(version["schema"]["openAPIV3Schema"]["properties"]["status"], status, "status")


def _undeclared(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    if isinstance(value, list):
        items = schema.get("items", {})
        return [field for i, item in enumerate(value) for field in _undeclared(items, item, f"{path}[{i}]")]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    declared, open_ended = schema["properties"], schema.get("x-kubernetes-preserve-unknown-fields", False)
    found = [] if open_ended else [f"{path}.{name}" for name in value if name not in declared]
    for name, child in value.items():
        if name in declared:
            found += _undeclared(declared[name], child, f"{path}.{name}")
    return found


def write_savepoint_files(url: str, size: int = 1000) -> int:
    """A savepoint's directory at `url` (file://) with its metadata and a state file."""
    directory = Path(url.removeprefix("file://"))
    directory.mkdir(parents=True)
    (directory / "_metadata").write_bytes(b"{}")
    (directory / "state").write_bytes(b"x" * size)
    return size


def driver_args(pod: dict[str, Any]) -> list[str]:
    """The arguments a driver pod runs `lockgate.runtime.driver.submit` with."""
    args: list[str] = pod["spec"]["containers"][0]["args"]
    return args


class StandInDriver:
    """Answers through etcd as a running driver does: heartbeat, savepoints."""

    def __init__(
        self,
        kubelet: Kubelet,
        etcd: Etcd,
        keys: JobKeys,
        *,
        answer: bool = True,  # False: it begins each savepoint and never finishes one
        rescales: bool = False,  # True: it rescales in place on request; False: it refuses to
        launch: int = 1,
        parallelism: int = 2,
        savepoint_dir: str | None = None,
        write_files: Callable[[str], int] = write_savepoint_files,
    ) -> None:
        self.kubelet, self.etcd, self.keys, self.answer = kubelet, etcd, keys, answer
        self.rescales = rescales
        self.parallelism = parallelism
        self.savepoint_dir = savepoint_dir
        """A directory to write each savepoint's files into, as the driver does
        (`<dir>/savepoint-<id>-<random>`); without it, paths name no files."""
        self.write_files = write_files
        """Writes a savepoint's files at a path of `savepoint_dir`, with the driver's
        credentials; their size (default: `file://` directories)."""
        self.requests: list[tuple[str, SavepointRequest]] = []
        self.pod = f"{keys.job}-driver-{launch}"  # the name the operator gives it
        self.heartbeat = StatusHeartbeat(
            etcd, keys, parallelism=parallelism, restarts=lambda: 0, driver=self.pod, ttl_s=5
        )

    async def _serve(self, revision: int) -> None:
        async for event in self.etcd.watch_prefix(self.keys.savepoint_requests, revision + 1):
            if event.deleted:
                continue
            request_id = event.key.decode().rsplit("/", 1)[1]
            request = decode(SavepointRequest, event.value)
            self.requests.append((request_id, request))
            if self.answer:
                await self.complete(request_id, request)
            else:  # begun, and slow: as a driver's coordinator says before it takes one
                pending = SavepointResult("pending", f"{self.savepoint_dir or 'file:///savepoints'}/pending")
                await self.etcd.put(self.keys.savepoint_result(request_id), encode(pending))

    async def complete(self, request_id: str, request: SavepointRequest) -> str:
        path, size = f"file:///savepoints/savepoint-{request_id}", None
        if self.savepoint_dir is not None:
            path = f"{self.savepoint_dir}/savepoint-{request_id}-{uuid.uuid4().hex[:8]}"
            size = self.write_files(path)
        result = SavepointResult("completed", path, bytes=size)
        await self.etcd.put(self.keys.savepoint_result(request_id), encode(result))
        if request.stop:
            await self.heartbeat.finish("stopped", savepoint=path)
            # The driver's process exits, and its kubelet reports the pod so.
            await self.kubelet.set_pod_phase(self.pod, "Succeeded")
        return path

    async def _serve_rescales(self, revision: int) -> None:
        async for event in self.etcd.watch_prefix(self.keys.rescale_requests, revision + 1):
            if event.deleted:
                continue
            request_id = event.key.decode().rsplit("/", 1)[1]
            target = decode(RescaleRequest, event.value).parallelism
            result_key = self.keys.rescale_result(request_id)
            await self.etcd.put(result_key, encode(RescaleResult("pending", self.parallelism)))
            if not self.rescales:
                refusal = RescaleResult("refused", self.parallelism, reason="this stand-in does not rescale")
                await self.etcd.put(result_key, encode(refusal))
                continue
            self.parallelism = target
            await self.heartbeat.start(target)
            await self.etcd.put(result_key, encode(RescaleResult("rescaled", target, checkpoint_id=1)))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[StandInDriver]:
        await self.heartbeat.start()
        # Read before the test goes on: a request it makes next is after this revision.
        _, revision = await self.etcd.get_prefix_at(self.keys.savepoint_requests)
        serving = [
            asyncio.create_task(self._serve(revision)),
            asyncio.create_task(self._serve_rescales(revision)),
        ]
        try:
            yield self
        finally:
            for task in serving:
                task.cancel()
            self.heartbeat.abandon()
            for task in serving:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
