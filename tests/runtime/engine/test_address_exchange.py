"""The tasks of a launch learn each other's exchange addresses through the job's
etcd: every task gets all P, in task order, whichever publishes first; an earlier
launch's addresses are never handed out, and a new coordinator clears them."""

from __future__ import annotations

import concurrent.futures

import pytest
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import AddressExchangeTimeoutError, CheckpointControl

from tests.runtime.coordination.running_job import Job


def _gather(config: EtcdConfig, keys: JobKeys, launch: int, index: int, parallelism: int) -> list[str]:
    control = CheckpointControl(config, keys, index, launch)
    try:
        return control.gather_addresses(f"10.0.0.{index}:{7000 + index}", parallelism)
    finally:
        control.close()


def test_every_task_gets_every_address_in_task_order(etcd_config, keys) -> None:
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        # Submitted last task first: the order of arrival is not the order of the answer.
        futures = [pool.submit(_gather, etcd_config, keys, 5, index, 3) for index in (2, 1, 0)]
        answers = [f.result(timeout=30) for f in futures]
    expected = ["10.0.0.0:7000", "10.0.0.1:7001", "10.0.0.2:7002"]
    assert answers == [expected] * 3


async def test_an_earlier_launchs_addresses_are_never_handed_out(etcd: Etcd, etcd_config, keys) -> None:
    await etcd.put(keys.exchange_of(4) + b"1", b"10.9.9.9:9999")  # launch 4's task 1, gone
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_gather, etcd_config, keys, 5, i, 2) for i in (0, 1)]
        answers = [f.result(timeout=30) for f in futures]
    assert answers == [["10.0.0.0:7000", "10.0.0.1:7001"]] * 2


async def test_a_new_coordinator_clears_earlier_launches_addresses(job: Job, etcd: Etcd) -> None:
    await etcd.put(job.keys.exchange_of(1) + b"0", b"10.9.9.9:9999")
    coordinator = job.coordinator(CheckpointConfig(interval_s=None))
    await coordinator.start()
    try:
        assert await etcd.get_prefix(job.keys.exchange) == []
    finally:
        await coordinator.close()


def test_a_task_that_never_publishes_is_named_when_the_wait_ends(etcd_config, keys) -> None:
    control = CheckpointControl(etcd_config, keys, 0, 7)
    try:
        with pytest.raises(AddressExchangeTimeoutError) as refused:
            control.gather_addresses("10.0.0.0:7000", 3, timeout_s=0.3)
    finally:
        control.close()
    message = str(refused.value)
    assert "launch 7" in message
    assert "tasks [1, 2]" in message
    assert "0.3 s" in message
