"""Several operator replicas with kopf peering: the highest priority is active,
and another takes over when it is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock
from kubernetes import client

from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.operator.operator_process import OperatorProcess
from tests.polling import eventually, eventually_true


def _peers(emulator: kmock.KubernetesEmulator) -> dict[str, Any]:
    peering = emulator.objects["kopf.dev/v1/clusterkopfpeerings", None, "lockgate"].raw
    return dict(peering.get("status") or {})


CREATED = 'lockgate_operator_reconciles_total{handler="create",result="ok"} 1.0'


async def test_with_peering_one_replica_of_several_is_active(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_server, tmp_path: Path
) -> None:
    emulator, url = cluster
    emulator.objects["kopf.dev/v1/clusterkopfpeerings", None, "lockgate"] = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "lockgate", "resourceVersion": "1"},
    }
    peering = ("--peering", "lockgate", "--priority")
    active = await OperatorProcess.start(url, etcd_server.endpoint, tmp_path, *peering, "100", name="active")
    standby: OperatorProcess | None = None
    try:
        # Peers that start at the same instant each see no other for a moment and
        # both act (kopf's peering has no election); a rollout starts them apart.
        await eventually(lambda: len(_peers(emulator)) == 1, "the active peer has registered", 30)
        standby = await OperatorProcess.start(
            url, etcd_server.endpoint, tmp_path, *peering, "10", name="standby"
        )
        await eventually(lambda: len(_peers(emulator)) == 2, "the standby has registered", 30)
        kubectl = Kubectl(emulator, client.ApiClient(client.Configuration(host=url)))
        await kubectl.apply("first", SPEC)
        await eventually(lambda: kubectl.status("first").get("launch") == 1, "the first job is launched", 30)

        async def active_created() -> bool:
            return CREATED in await active.metrics()

        await eventually_true(active_created, "the active peer counts its create handler")
        assert "lockgate_operator_reconciles_total{" not in await standby.metrics(), (
            "the lower-priority peer stays paused"
        )

        assert await active.stop() == 0, active.log_tail()
        await kubectl.apply("second", SPEC)
        await eventually(
            lambda: kubectl.status("second").get("launch") == 1,
            "the standby takes over and launches a job created after the active one left",
            30,
        )

        async def standby_created() -> bool:
            return CREATED in await standby.metrics()

        await eventually_true(standby_created, "the standby counts the create it handled")
        assert kubectl.status("first").get("launch") == 1, "the first job is not launched twice"
    finally:
        await active.stop()
        if standby is not None:
            await standby.stop()
