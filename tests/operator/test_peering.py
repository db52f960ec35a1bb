"""Several operator replicas with kopf peering: the highest priority is active."""

from __future__ import annotations

import kmock

from tests.operator.cluster_helpers import SPEC, Kubectl
from tests.operator.conftest import Operator
from tests.polling import eventually


def _creates(peer: Operator) -> float:
    assert peer.context is not None
    labels = {"handler": "create", "result": "ok"}
    return peer.context.metrics.registry.get_sample_value("lockgate_operator_reconciles_total", labels) or 0.0


async def test_with_peering_one_replica_of_several_is_active(
    cluster: tuple[kmock.KubernetesEmulator, str], etcd_config, tmp_path, job_name: str
) -> None:
    emulator, url = cluster
    emulator.objects["kopf.dev/v1/clusterkopfpeerings", None, "lockgate"] = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": "lockgate", "resourceVersion": "1"},
    }
    storage = f"file://{tmp_path}/checkpoints"
    active = Operator(url, etcd_config, storage, peering="lockgate", priority=100)
    standby = Operator(url, etcd_config, storage, peering="lockgate", priority=10)
    await active.start()
    await standby.start()
    try:
        kubectl = Kubectl(emulator, active.api())
        await kubectl.apply(job_name, SPEC)
        await eventually(lambda: kubectl.status(job_name).get("launch") == 1, "the job is launched")
        await eventually(lambda: _creates(active) == 1.0, "the active peer counts its create handler")
        assert _creates(standby) == 0.0, "the lower-priority peer stays paused"
    finally:
        # The active one first: a paused kopf operator does not stop until its peers are gone.
        await active.stop()
        await standby.stop()
