"""The tasks of a launch meet through the job's etcd. They learn each other's
exchange addresses: every task gets all P, in task order, whichever publishes
first; an earlier launch's addresses are never handed out, and a new coordinator
clears them. And they wait for each other at a point of their start (a sink's
ids fenced): none goes on before all P arrived, an earlier launch's arrivals do
not count, and one that never arrives is named."""

from __future__ import annotations

import concurrent.futures

import pytest
from lockgate.runtime.coordination.coordinator import CheckpointConfig
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.engine.control import (
    AddressExchangeTimeoutError,
    CheckpointControl,
    RendezvousTimeoutError,
)

from tests.polling import eventually_true
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
    await etcd.put(job.keys.rendezvous_of(1, "sums/transactional ids fenced") + b"0", b"")
    coordinator = job.coordinator(CheckpointConfig(interval_s=None))
    await coordinator.start()
    try:
        assert await etcd.get_prefix(job.keys.exchange) == []
        assert await etcd.get_prefix(job.keys.rendezvous) == []
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


POINT = "sums/transactional ids fenced"


def _meet(config: EtcdConfig, keys: JobKeys, launch: int, index: int, parallelism: int) -> None:
    control = CheckpointControl(config, keys, index, launch)
    try:
        control.rendezvous(POINT, parallelism)
    finally:
        control.close()


async def test_no_task_goes_on_from_a_rendezvous_before_every_task_arrived(
    etcd: Etcd, etcd_config, keys
) -> None:
    await etcd.put(keys.rendezvous_of(4, POINT) + b"2", b"")  # launch 4's task 2: no stand-in
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        early = [pool.submit(_meet, etcd_config, keys, 5, index, 3) for index in (0, 1)]
        prefix = keys.rendezvous_of(5, POINT)

        async def both_arrived() -> bool:
            return len(await etcd.get_prefix(prefix)) == 2

        await eventually_true(both_arrived, "tasks 0 and 1 at the point", 30)
        assert not any(f.done() for f in early), "a task went on before task 2 arrived"
        last = pool.submit(_meet, etcd_config, keys, 5, 2, 3)
        for future in [*early, last]:
            future.result(timeout=30)


def test_a_task_that_never_arrives_is_named_when_the_wait_ends(etcd_config, keys) -> None:
    control = CheckpointControl(etcd_config, keys, 1, 7)
    try:
        with pytest.raises(RendezvousTimeoutError) as refused:
            control.rendezvous(POINT, 3, timeout_s=0.3)
    finally:
        control.close()
    assert str(refused.value) == (
        f"task 1 of launch 7 waited 0.3 s at {POINT!r} for tasks [0, 2], which never got there"
    )
