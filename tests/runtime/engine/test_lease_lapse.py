"""A driver whose lease lapsed while etcd was unreachable relaunches from its latest
checkpoint instead of ending the run: real tasks (threads, TCP exchange) beside a
real coordinator, against a real etcd that is paused for longer than the lease."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lockgate.runtime import read_committed
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.etcd_server import EtcdServer
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.leadership import LEASE_TTL_S
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_master import JobMaster
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.restart import restart_strategy
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.polling import eventually_true

COUNT, KEYS = 4_000, 13


async def test_a_lease_lapsed_in_an_etcd_outage_relaunches_and_loses_nothing(
    own_etcd: EtcdServer, tmp_path: Path
) -> None:
    out = f"file://{tmp_path}/out"
    etcd_config = EtcdConfig((own_etcd.endpoint,))
    keys = JobKeys("test", "lapsed")
    spec = JobSpec(
        "tests.jobs.configurable:running_sum",
        keys,
        2,
        StateConfig("heap", tmp_path / "local", 32),
        etcd_config,
        secret=b"s" * 32,
        args=(("count", str(COUNT)), ("keys", str(KEYS)), ("rate", "400"), ("output", out)),
        bounded=True,
    )
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    master = JobMaster(spec, ThreadStage(), storage, CheckpointConfig(interval_s=0.2, timeout_s=60))
    run = asyncio.create_task(master.run(restart_strategy("fixed-delay", attempts=3, delay_s=0.5)))
    async with Etcd(etcd_config) as etcd:
        await eventually_true(lambda: _checkpointed(etcd, keys), "a checkpoint completed", 60)
    # The fault itself: etcd silent for longer than the coordinator's lease.
    own_etcd.pause()
    await asyncio.sleep(LEASE_TTL_S + 3)
    own_etcd.resume()
    result = await asyncio.wait_for(run, 240)

    assert result.restarts >= 1, "the fenced launch was relaunched"
    output = read_committed(out)
    assert sorted(r["n"] for r in output) == list(range(COUNT)), "nothing lost, nothing twice"


async def _checkpointed(etcd: Etcd, keys: JobKeys) -> bool:
    return await etcd.get(keys.latest) is not None
