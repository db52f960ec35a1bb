"""What the scenarios do as a user with kubectl does, over the Kubernetes API —
the same requests against the emulated API server and a real cluster."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client
from lockgate.operator.naming import API_VERSION, COMPONENT_LABEL, GROUP, JOB_LABEL, KIND, PLURAL, VERSION

MERGE = "application/merge-patch+json"


class Kubectl:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    async def apply(self, name: str, spec: dict[str, Any]) -> None:
        """`kubectl apply -f job.yaml` of a new StreamingJob."""
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        await asyncio.to_thread(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, body
        )

    async def event_reasons(self, name: str) -> list[str]:
        """`kubectl describe sj NAME`'s Events: their reasons, oldest first."""
        events = await asyncio.to_thread(
            self.core.list_namespaced_event, self.namespace, field_selector=f"involvedObject.name={name}"
        )
        ordered = sorted(
            events.items, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name)
        )
        return [str(e.reason) for e in ordered]

    async def create_secret(self, name: str, data: dict[str, str]) -> None:
        """`kubectl create secret generic NAME --from-literal=KEY=VALUE ...`."""
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}
        await asyncio.to_thread(self.core.create_namespaced_secret, self.namespace, body)

    async def scale(self, name: str, replicas: int) -> None:
        """`kubectl scale streamingjob NAME --replicas=N`: a patch of the scale subresource."""
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object_scale,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {"spec": {"replicas": replicas}},
            _content_type=MERGE,
        )

    async def patch(self, name: str, spec: dict[str, Any]) -> None:
        """`kubectl patch streamingjob NAME --type merge -p '{"spec": ...}'`."""
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {"spec": spec},
            _content_type=MERGE,
        )

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(
            self.custom.delete_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, name
        )

    async def job(self, name: str) -> dict[str, Any] | None:
        try:
            found = await asyncio.to_thread(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, name
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(found)

    async def status(self, name: str) -> dict[str, Any]:
        job = await self.job(name)
        return dict((job or {}).get("status") or {})

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod = await asyncio.to_thread(self.core.read_namespaced_pod, name, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(self.core.api_client.sanitize_for_serialization(pod))

    async def delete_pod(self, name: str) -> None:
        """`kubectl delete pod NAME --wait=false`."""
        await asyncio.to_thread(self.core.delete_namespaced_pod, name, self.namespace)

    async def pods(self, selector: str) -> list[dict[str, Any]]:
        """`kubectl get pods -l SELECTOR -o yaml`, by name."""
        listing = await asyncio.to_thread(
            self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        pods = [dict(self.core.api_client.sanitize_for_serialization(pod)) for pod in listing.items]
        return sorted(pods, key=lambda pod: str(pod["metadata"]["name"]))

    async def service_accounts(self) -> list[dict[str, Any]]:
        """`kubectl get serviceaccounts -o yaml`."""
        listing = await asyncio.to_thread(self.core.list_namespaced_service_account, self.namespace)
        return [dict(self.core.api_client.sanitize_for_serialization(account)) for account in listing.items]

    async def driver_pods(self, job: str) -> list[str]:
        """The names of the job's driver pods."""
        pods = await self.pods(f"{JOB_LABEL}={job},{COMPONENT_LABEL}=driver")
        return [pod["metadata"]["name"] for pod in pods]
