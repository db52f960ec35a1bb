"""The kubelet's part for the emulated cluster: runs each pod of a namespace —
the operator's driver pods and the executor pods Spark creates — as a local
process (see local_pod.py) on a loopback address of its own (pod_network.py),
and reports on it through the API.

As a kubelet does, it starts a pod once the ConfigMaps and Secrets it mounts or
reads exist, reports it Running and Ready with its pod IP once its process
starts and Succeeded or Failed (with the exit code) when it ends; a deleted
pod's process gets SIGTERM, then SIGKILL after the pod's grace period. Deletion
is graceful as on a real cluster: the runner holds a finalizer on every pod it
runs and lets the pod go only once its processes are gone, so the operator sees
a pod disappear only after its driver has stopped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e.local_pod import Node, container, local_pod
from e2e.log_tail import telling_tail
from e2e.pod_env import MissingSourceError, container_env
from e2e.pod_network import PodNetwork

log = logging.getLogger(__name__)
FINALIZER = "e2e.lockgate.dev/pod-runner"
SYNC_EVERY_S = 0.2  # how often the pod list is read: a kubelet's relist, made quick


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(ready: bool) -> list[dict[str, str]]:
    now, status = _now(), "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
        {"type": "Ready", "status": status, "lastTransitionTime": now},
    ]


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # killed by signal N: 128 + N


@dataclass
class RunningPod:
    name: str
    container: dict[str, Any]
    process: asyncio.subprocess.Process
    log: Path
    ip: str
    pod: dict[str, Any]
    metrics_port: int | None
    finished: bool = False  # its end has been reported
    terminating: bool = False

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


class PodRunner:
    def __init__(self, api: client.ApiClient, namespace: str, root: Path, *, executor_pods: bool) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.root = root
        self.pods: dict[str, RunningPod] = {}
        self.failed_starts: set[str] = set()
        self._terminations: set[asyncio.Task[None]] = set()
        root.mkdir(parents=True, exist_ok=True)
        self.network = PodNetwork(root / "hosts")
        api_server = str(api.configuration.host).rstrip("/")
        self.node = Node(api_server, self.network.java_options(), executor_pods=executor_pods)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[PodRunner]:
        syncing = asyncio.create_task(self._sync_forever())
        try:
            yield self
        finally:
            syncing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await syncing
            for pod in self.pods.values():  # the node goes down: nothing may outlive the test
                pod.signal_group(signal.SIGKILL)
                await pod.process.wait()

    def kill(self, name: str) -> None:
        """What a crash or the OOM killer does to the pod's processes."""
        self.pods[name].signal_group(signal.SIGKILL)

    def log_tail(self, name: str) -> str:
        pod = self.pods.get(name)
        if pod is None:
            return f"(no pod {name} ran)"
        return telling_tail(pod.log.read_text(errors="replace"))

    async def _sync_forever(self) -> None:
        while True:
            try:
                await self._sync()
            except client.ApiException as error:  # a conflict with a concurrent write: the next sync
                log.warning("pod runner: %s %s", error.status, error.reason)
            await asyncio.sleep(SYNC_EVERY_S)

    async def _sync(self) -> None:
        listing = await asyncio.to_thread(self.core.list_namespaced_pod, self.namespace)
        pods = {
            p["metadata"]["name"]: p for p in self.core.api_client.sanitize_for_serialization(listing.items)
        }
        for name, pod in pods.items():
            running = self.pods.get(name)
            if (
                running is None
                and name not in self.failed_starts
                and not pod["metadata"].get("deletionTimestamp")
            ):
                if (pod.get("status") or {}).get("phase") in (None, "Pending"):
                    try:
                        await self._start(pod)
                    except MissingSourceError as missing:  # the next sync tries again
                        log.info("pod runner: %s waits for %s", name, missing)
            elif running is not None and pod["metadata"].get("deletionTimestamp") and not running.terminating:
                running.terminating = True
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
                task = asyncio.create_task(self._terminate(running, grace))
                self._terminations.add(task)
                task.add_done_callback(self._terminations.discard)
        for name, running in self.pods.items():
            if name not in pods and not running.terminating:  # gone without waiting for us
                running.terminating = True
                running.signal_group(signal.SIGKILL)
            if running.process.returncode is not None and not running.finished:
                await self._report_end(running)
        await self._publish_names(pods)

    async def _publish_names(self, pods: dict[str, dict[str, Any]]) -> None:
        """The names pods resolve: running pods and the Services that select them."""
        services = await asyncio.to_thread(self.core.list_namespaced_service, self.namespace)
        serialized = self.core.api_client.sanitize_for_serialization(services.items)
        running = {
            name: (pod.ip, pods[name])
            for name, pod in self.pods.items()
            if name in pods and pod.process.returncode is None
        }
        self.network.write(running, serialized)

    async def _start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        directory = self.root / name
        mounts = {m["mountPath"]: await self._volume(pod, m["name"], directory) for m in self._mounts(pod)}
        ip = self.network.allocate()
        env = await container_env(pod, container(pod), ip, self._read_data)
        await self._patch(name, {"metadata": {"finalizers": [FINALIZER]}})
        scratch = directory / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        local = local_pod(pod, env, ip, mounts=mounts, scratch=scratch, node=self.node)
        log_file = directory / "log"
        with log_file.open("wb") as out:
            try:
                process = await asyncio.create_subprocess_exec(
                    *local.argv,
                    env=local.env,
                    cwd=scratch,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: the pod's processes, all of them
                )
            except OSError as error:  # as a kubelet reports a container it cannot start
                start_error: OSError | None = error
                out.write(f"pod runner: cannot start {local.argv[0]}: {error}\n".encode())
            else:
                start_error = None
        if start_error is not None:  # reported once the log is on disk: whoever sees Failed can read why
            await self._start_failed(pod, f"{local.argv[0]}: {start_error}")
            return
        running = RunningPod(name, container(pod), process, log_file, ip, pod, local.metrics_port)
        self.pods[name] = running
        await self._publish_names({**{n: p.pod for n, p in self.pods.items()}, name: pod})
        state = {"running": {"startedAt": _now()}}
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "127.0.0.1",
            "startTime": _now(),
            "conditions": _conditions(ready=True),
        }
        statuses = [self._status(running.container, state)]
        await self._patch_status(name, {**status, "containerStatuses": statuses})

    async def _read_data(self, kind: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data or a Secret's decoded data; None if it does not exist."""
        try:
            if kind == "configMap":
                config_map = await asyncio.to_thread(
                    self.core.read_namespaced_config_map, name, self.namespace
                )
                return dict(config_map.data or {})
            secret = await asyncio.to_thread(self.core.read_namespaced_secret, name, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}

    @staticmethod
    def _mounts(pod: dict[str, Any]) -> list[dict[str, Any]]:
        return list(container(pod).get("volumeMounts") or [])

    async def _volume(self, pod: dict[str, Any], volume_name: str, directory: Path) -> Path:
        """The directory standing in for a volume, filled as the kubelet fills it."""
        (volume,) = [v for v in pod["spec"].get("volumes", []) if v["name"] == volume_name]
        if "hostPath" in volume:
            return Path(volume["hostPath"]["path"])
        target = directory / "volumes" / volume_name
        target.mkdir(parents=True, exist_ok=True)
        source = volume.get("configMap") or volume.get("secret")
        if source is not None:
            kind = "configMap" if "configMap" in volume else "secret"
            data = await self._read_data(kind, source.get("name") or source["secretName"])
            if data is None and not source.get("optional"):
                raise MissingSourceError(
                    f"{kind} {source.get('name') or source['secretName']} (volume {volume_name})"
                )
            items = source.get("items")
            for key, text in (data or {}).items():
                paths = [item["path"] for item in items or [] if item["key"] == key]
                for path in paths if items else [key]:
                    (target / path).parent.mkdir(parents=True, exist_ok=True)
                    (target / path).write_text(text)
        elif "emptyDir" not in volume:
            raise ValueError(f"pod {pod['metadata']['name']}: volume {volume_name} is of a kind not run here")
        return target

    async def _terminate(self, pod: RunningPod, grace_s: float) -> None:
        if pod.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                pod.process.send_signal(signal.SIGTERM)  # to the main process, as tini passes it on
            try:
                async with asyncio.timeout(grace_s):
                    await pod.process.wait()
            except TimeoutError:
                pod.signal_group(signal.SIGKILL)
                await pod.process.wait()
        if not pod.finished:
            await self._report_end(pod)
        await self._patch(pod.name, {"metadata": {"finalizers": []}})  # the API server removes it now

    async def _start_failed(self, pod: dict[str, Any], message: str) -> None:
        name = pod["metadata"]["name"]
        log.error("pod runner: pod %s cannot start: %s", name, message)
        self.failed_starts.add(name)  # with restartPolicy Never, as Lockgate's pods have: not again
        state = {
            "terminated": {"exitCode": 128, "reason": "StartError", "message": message, "finishedAt": _now()}
        }
        status = self._status(container(pod), state)
        ended = {"phase": "Failed", "conditions": _conditions(ready=False), "containerStatuses": [status]}
        with contextlib.suppress(client.ApiException):
            await self._patch_status(name, ended)
            await self._patch(name, {"metadata": {"finalizers": []}})  # no process to wait for

    async def _report_end(self, pod: RunningPod) -> None:
        pod.signal_group(signal.SIGKILL)  # the container goes with its main process
        returncode = await pod.process.wait()
        pod.finished = True
        code = _exit_code(returncode)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "finishedAt": _now(),
        }
        phase = "Succeeded" if code == 0 else "Failed"
        status = self._status(pod.container, {"terminated": terminated})
        ended = {"phase": phase, "conditions": _conditions(ready=False), "containerStatuses": [status]}
        with contextlib.suppress(client.ApiException):  # a pod already gone has nothing to report to
            await self._patch_status(pod.name, ended)

    @staticmethod
    def _status(spec: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """A container's status; `spec`: the container as the pod declares it."""
        return {
            "name": spec["name"],
            "image": spec.get("image", ""),
            "imageID": "",
            "ready": "running" in state,
            "restartCount": 0,
            "state": state,
        }

    async def _patch(self, name: str, body: dict[str, Any]) -> None:
        await asyncio.to_thread(
            self.core.patch_namespaced_pod,
            name,
            self.namespace,
            body,
            _content_type="application/merge-patch+json",
        )

    async def _patch_status(self, name: str, status: dict[str, Any]) -> None:
        await asyncio.to_thread(
            self.core.patch_namespaced_pod_status,
            name,
            self.namespace,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
