"""The emulated API server does what Spark's Kubernetes client needs of a real one:
selectors on list, watch and deletion of a collection, pods born Pending,
deletions seen by watchers, dependents collected when their owner goes."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.kube_emulator import VersionedEmulator, emulated_api_server
from tests.kube_selectors import SelectorError, field_matcher, label_matcher
from tests.polling import eventually_true

PODS = "/api/v1/namespaces/ns/pods"


def test_label_selectors_read_as_the_api_server_reads_them() -> None:
    labels = {"spark-role": "executor", "spark-exec-id": "2", "app": "a"}
    assert label_matcher(None)(labels)
    assert label_matcher("spark-role=executor,app==a")(labels)
    assert not label_matcher("spark-role=driver")(labels)
    assert label_matcher("spark-exec-id in (1, 2,3)")(labels)
    assert not label_matcher("spark-exec-id notin (2)")(labels)
    assert label_matcher("spark-role!=driver,app,!missing")(labels)
    assert not label_matcher("missing")(labels)
    assert not label_matcher("spark-role=executor,spark-exec-id in (3,4)")(labels)
    with pytest.raises(SelectorError):
        label_matcher("a b c")


def test_field_selectors_read_dotted_paths_and_absent_fields_as_empty() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert field_matcher("metadata.name=p,status.phase==Running")(pod)
    assert not field_matcher("status.phase!=Running")(pod)
    assert field_matcher("spec.nodeName=")(pod)
    with pytest.raises(SelectorError):
        field_matcher("status.phase in (Running)")


@pytest_asyncio.fixture
async def api() -> AsyncIterator[tuple[VersionedEmulator, aiohttp.ClientSession]]:
    async with emulated_api_server() as (emulator, url), aiohttp.ClientSession(url) as session:
        yield emulator, session


def _pod(name: str, labels: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels, **metadata}}


async def _create(session: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(path, json=body) as response:
        assert response.status < 300, await response.text()
        return dict(await response.json())


async def _names(session: aiohttp.ClientSession, path: str, **params: str) -> set[str]:
    async with session.get(path, params=params) as response:
        assert response.status == 200, await response.text()
        return {item["metadata"]["name"] for item in (await response.json())["items"]}


async def test_a_pod_is_created_pending_with_its_creation_time(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    pod = await _create(session, PODS, _pod("p", {}))
    assert pod["status"]["phase"] == "Pending"
    assert pod["metadata"]["creationTimestamp"].endswith("Z")


async def test_a_secrets_string_data_is_stored_encoded_in_its_data(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"KEY": "välue"}}
    secret = await _create(session, PODS.replace("pods", "secrets"), body)
    assert "stringData" not in secret
    assert base64.b64decode(secret["data"]["KEY"]).decode() == "välue"


async def test_lists_filter_by_label_and_field_selectors(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    await _create(session, PODS, _pod("driver", {"spark-role": "driver"}))
    for index in (1, 2, 3):
        await _create(session, PODS, _pod(f"exec-{index}", {"spark-role": "executor", "id": str(index)}))
    async with session.patch(
        f"{PODS}/exec-2/status",
        json={"status": {"phase": "Running"}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200, await response.text()

    assert await _names(session, PODS, labelSelector="spark-role=executor,id in (1,3)") == {
        "exec-1",
        "exec-3",
    }
    assert await _names(session, PODS, fieldSelector="status.phase=Running") == {"exec-2"}
    assert await _names(session, PODS, fieldSelector="metadata.name=driver") == {"driver"}
    assert await _names(session, "/api/v1/pods", labelSelector="!spark-role") == set()
    async with session.get(PODS, params={"labelSelector": "a b c"}) as response:
        assert response.status == 400


async def _watch(session: aiohttp.ClientSession, events: list[dict[str, Any]], **params: str) -> None:
    async with session.get(PODS, params={"watch": "true", **params}) as response:
        async for line in response.content:
            if line.strip():
                events.append(json.loads(line))


async def test_a_watch_streams_only_the_selected_objects_and_sees_their_deletion(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    await _create(session, PODS, _pod("before", {"spark-role": "executor"}))
    await _create(session, PODS, _pod("other", {"spark-role": "driver"}))
    async with session.get(PODS) as response:
        since = (await response.json())["metadata"]["resourceVersion"]
    events: list[dict[str, Any]] = []
    watching = asyncio.create_task(
        _watch(session, events, labelSelector="spark-role=executor", resourceVersion=since)
    )
    try:
        await _create(session, PODS, _pod("after", {"spark-role": "executor"}))
        await _create(session, PODS, _pod("unselected", {"spark-role": "driver"}))
        # Unchanged since the list: its deletion is still news to the watcher.
        async with session.delete(f"{PODS}/before") as response:
            assert response.status == 200

        async def seen() -> bool:
            return len(events) >= 2

        await eventually_true(seen, "two events")
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "after"),
            ("DELETED", "before"),
        ]
    finally:
        watching.cancel()


async def test_deleting_a_collection_deletes_the_selected_objects_only(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    await _create(session, PODS, _pod("exec-1", {"spark-role": "executor"}))
    await _create(session, PODS, _pod("exec-2", {"spark-role": "executor"}, finalizers=["kubelet"]))
    await _create(session, PODS, _pod("driver", {"spark-role": "driver"}))
    async with session.delete(PODS, params={"labelSelector": "spark-role=executor"}) as response:
        assert response.status == 200, await response.text()
        deleted = await response.json()
    assert deleted["kind"] == "PodList"
    assert {item["metadata"]["name"] for item in deleted["items"]} == {"exec-1", "exec-2"}
    assert await _names(session, PODS) == {"driver", "exec-2"}, "a finalizer holds exec-2"
    async with session.get(f"{PODS}/exec-2") as response:
        assert (await response.json())["metadata"]["deletionTimestamp"]


async def test_dependents_go_when_their_owner_goes_and_their_dependents_after_them(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    driver = await _create(session, PODS, _pod("driver", {}))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": driver["metadata"]["uid"]}
    executor = await _create(session, PODS, _pod("exec-1", {}, ownerReferences=[owner]))
    await _create(session, PODS, _pod("exec-2", {}, ownerReferences=[owner], finalizers=["kubelet"]))
    by_executor = {**owner, "name": "exec-1", "uid": executor["metadata"]["uid"]}
    await _create(session, PODS, _pod("grandchild", {}, ownerReferences=[by_executor]))
    config_map = {"metadata": {"name": "conf", "ownerReferences": [owner]}, "data": {}}
    await _create(session, "/api/v1/namespaces/ns/configmaps", config_map)
    await _create(session, PODS, _pod("unowned", {}))

    async with session.delete(f"{PODS}/driver") as response:
        assert response.status == 200
    assert await _names(session, PODS) == {"exec-2", "unowned"}, "exec-2 waits for its finalizer"
    assert await _names(session, "/api/v1/namespaces/ns/configmaps") == set()
    async with session.patch(
        f"{PODS}/exec-2",
        json={"metadata": {"finalizers": []}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200
    assert await _names(session, PODS) == {"unowned"}


async def test_a_watch_over_a_websocket_streams_events_as_text_messages(
    api: tuple[VersionedEmulator, aiohttp.ClientSession],
) -> None:
    _, session = api
    await _create(session, PODS, _pod("exec-1", {"spark-role": "executor"}))
    await _create(session, PODS, _pod("driver", {"spark-role": "driver"}))
    async with session.ws_connect(
        PODS, params={"watch": "true", "labelSelector": "spark-role=executor"}
    ) as ws:
        first = json.loads(await ws.receive_str(timeout=10))
        await _create(session, PODS, _pod("exec-2", {"spark-role": "executor"}))
        second = json.loads(await ws.receive_str(timeout=10))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in (first, second)] == [
        ("ADDED", "exec-1"),
        ("ADDED", "exec-2"),
    ]
