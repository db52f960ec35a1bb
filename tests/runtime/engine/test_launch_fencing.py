"""Tasks of a launch that no longer coordinates the job stop by themselves, in-process
against a real etcd: an executor cut off from its driver must not go on computing,
and its sinks must not commit, for a coordinator that lost the job."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from lockgate.runtime import GeneratorSource, StreamEnvironment
from lockgate.runtime.coordination.coordinator import CheckpointConfig, CheckpointCoordinator
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import CheckpointControl, LaunchDeposedError
from lockgate.runtime.engine.handshake import AuthenticationError, ChannelId
from lockgate.runtime.engine.job_spec import JobSpec, new_launch_secret
from lockgate.runtime.engine.local_runner import run_local
from lockgate.runtime.engine.network import ExchangeServer, RemoteOutputChannel
from lockgate.runtime.engine.plan import job_plan
from lockgate.runtime.engine.task import TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.snapshot.storage import CheckpointStorage

from tests.jobs.counting import running_sum
from tests.runtime.engine.harness import M


@pytest.mark.parametrize("driver", ["stopped", "cut off"])
async def test_tasks_of_a_replaced_launch_stop_by_themselves(
    etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path, driver: str
) -> None:
    env = StreamEnvironment("sum")
    running_sum(env, GeneratorSource(None, keys=7, partitions=2, rate=2_000), f"file://{tmp_path}/out")
    graph = env.graph()
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    plan = job_plan(graph, 2, M)

    # Each coordinator has an etcd client of its own, as each launch of a driver does.
    first_etcd, successor_etcd = Etcd(etcd_config), Etcd(etcd_config)

    # A short lease, so the cut-off case is quick, but not so short that a refresh
    # round-trip on a busy 2-core machine running the tasks in this process misses it.
    def coordinator(client: Etcd) -> CheckpointCoordinator:
        return CheckpointCoordinator(
            client, keys, storage, plan, CheckpointConfig(interval_s=None), lease_ttl_s=4
        )

    first = coordinator(first_etcd)
    await first.start()
    configs = [TaskConfig(i, 2, StateConfig("heap", tmp_path / "local", M)) for i in range(2)]
    controls: list[CheckpointControl] = []

    def control(index: int) -> CheckpointControl:
        controls.append(CheckpointControl(etcd_config, keys, index, first.launch))
        return controls[-1]

    tasks = asyncio.create_task(
        asyncio.to_thread(run_local, graph, configs, control, trigger_revision=first.trigger_revision)
    )
    await asyncio.wait_for(first.trigger(), 20)  # the launch runs and checkpoints
    await first.close(release=driver == "stopped")  # "cut off": its lease is left to lapse
    await first_etcd.close()
    successor = coordinator(successor_etcd)
    await successor.start(wait_s=10)
    try:
        with pytest.raises(LaunchDeposedError, match=f"launch {first.launch}"):
            await asyncio.wait_for(tasks, 30)
    finally:
        await successor.close()
        await successor_etcd.close()
    assert successor.launch == first.launch + 1
    # The first task to see the coordinator gone stops the run; the others are then
    # cancelled with it, and may close before their own watch delivers the news.
    assert any(c.deposed is not None for c in controls)


async def test_a_task_asks_etcd_whether_its_launch_still_leads_not_its_watch(
    etcd_config: EtcdConfig, keys: JobKeys, tmp_path: Path
) -> None:
    """What a sink asks before it acts on restored committables (`confirm_launch`): a
    task held since it started, its watch never run, learns of its successor at once."""
    env = StreamEnvironment("sum")
    running_sum(env, GeneratorSource(10, keys=7, partitions=2), f"file://{tmp_path}/out")
    storage = CheckpointStorage(f"file://{tmp_path}/checkpoints")
    plan = job_plan(env.graph(), 1, M)
    async with Etcd(etcd_config) as first_etcd, Etcd(etcd_config) as successor_etcd:
        first = CheckpointCoordinator(first_etcd, keys, storage, plan, CheckpointConfig(interval_s=None))
        await first.start()
        control = await asyncio.to_thread(CheckpointControl, etcd_config, keys, 0, first.launch)
        try:
            await asyncio.to_thread(control.confirm_launch)  # its launch leads: nothing raised
            await first.close(release=True)
            successor = CheckpointCoordinator(
                successor_etcd, keys, storage, plan, CheckpointConfig(interval_s=None)
            )
            await successor.start()
            try:
                assert control.deposed is None, "the held task's watch never ran"
                with pytest.raises(
                    LaunchDeposedError, match=f"launch {successor.launch} has replaced launch {first.launch}"
                ):
                    await asyncio.to_thread(control.confirm_launch)
            finally:
                await successor.close()
        finally:
            await asyncio.to_thread(control.close)


def test_a_task_of_an_earlier_launch_cannot_open_a_channel_to_the_current_one() -> None:
    """Each launch has a secret of its own: the old task's handshake fails, and the
    current launch's server reads nothing from it."""
    spec = JobSpec(
        "tests.jobs.wordcount:build",
        JobKeys("test", "fenced"),
        2,
        StateConfig("heap", Path("/nonexistent"), M),
        EtcdConfig(("http://127.0.0.1:1",)),
        secret=b"driver" * 6,
    )
    earlier = spec.for_launch(1, None, 1, new_launch_secret())
    current = spec.for_launch(2, None, 1, new_launch_secret())
    assert earlier.secret != current.secret
    server = ExchangeServer(current.secret)
    try:
        inbound = server.expect(ChannelId("fenced", 2, "count", 0, 1), 4, threading.Event())
        server.start()
        stale = RemoteOutputChannel(
            server.address, ChannelId("fenced", 1, "count", 0, 1), earlier.secret, threading.Event()
        )
        with pytest.raises(AuthenticationError):
            stale.connect(timeout_s=5)
        assert not inbound.attached.is_set()
        assert server.refused == 1
    finally:
        server.close()
