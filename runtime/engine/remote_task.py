"""One task of a distributed run (a Spark barrier task): exchange addresses with
the other tasks through the job's etcd, connect, run subtask `index` of every vertex."""

from __future__ import annotations

import logging
import threading

from lockgate.runtime.coordination.ack_seal import ack_key
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.job_failure import carried, job_code_paths
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.network import ExchangeServer
from lockgate.runtime.engine.task import Task
from lockgate.runtime.engine.tcp_wiring import tcp_wiring
from lockgate.runtime.metrics.serving import serve
from lockgate.runtime.metrics.task_metrics import task_registry

log = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"exchange address {address!r} is not host:port")
    return host, int(port)


def run_task(spec: JobSpec, index: int, *, bind_host: str, advertise_host: str) -> None:
    control = CheckpointControl(
        spec.control_plane, spec.keys, index, spec.launch, ack_key=ack_key(spec.secret)
    )
    try:
        _connect_and_run(spec, index, control, bind_host=bind_host, advertise_host=advertise_host)
    except BaseException as error:
        job_failure = carried(error, job_code_paths(spec.entrypoint))
        if job_failure is None:
            raise
        control.record_failure(str(job_failure))
        raise job_failure from error  # the driver shows the job's part of it (job_failure.py)
    finally:
        control.close()


def _connect_and_run(
    spec: JobSpec, index: int, control: CheckpointControl, *, bind_host: str, advertise_host: str
) -> None:
    graph = spec.graph()
    cancelled = threading.Event()
    server = ExchangeServer(spec.secret, host=bind_host, liveness=spec.liveness())
    try:
        published = control.gather_addresses(f"{advertise_host}:{server.address[1]}", spec.parallelism)
        addresses = [parse_address(a) for a in published]
    except BaseException:
        server.close()
        raise
    wiring = tcp_wiring(
        graph,
        server,
        addresses,
        job=spec.keys.job,
        launch=spec.launch,
        index=index,
        secret=spec.secret,
        capacity=spec.channel_capacity,
        cancelled=cancelled,
    )
    try:
        task = Task(
            graph,
            spec.task_config(index),
            control,
            wiring=wiring,
            restore=spec.restore,
            cancelled=cancelled,
            rendezvous=lambda point: control.rendezvous(point, spec.parallelism),
        )
    except BaseException:
        for close in wiring.closers:  # Task.run would have; it never started
            close()
        raise
    ports = spec.metrics_ports
    metrics = None if ports is None else serve(task_registry(task, spec.keys), ports, spec.metrics_host)
    if metrics is not None:
        log.info("task %s serves metrics on %s:%s", index, spec.metrics_host, metrics.port)
    try:
        control.start(spec.trigger_revision)
        task.run()
    finally:
        if metrics is not None:
            metrics.close()
