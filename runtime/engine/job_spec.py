"""Everything a task needs to run its share of a job, shipped from the driver.

The graph itself is not shipped: each task imports the entrypoint and builds it,
as the driver did, so only this small, plain record crosses the wire. In-process
runs (`lockgate.testing`) may give a `graph_factory` instead, which the job master
and each in-process task call: every subtask still gets its own instances of the
job's functions.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.coordination.control_plane import ControlPlane
from lockgate.runtime.coordination.keys import JobKeys
from lockgate.runtime.coordination.restore_point import RestorePoint
from lockgate.runtime.engine.alignment import Mode
from lockgate.runtime.engine.channels import DEFAULT_CHANNEL_CAPACITY
from lockgate.runtime.engine.frame_sizing import DEFAULT_IN_FLIGHT_TARGET_S
from lockgate.runtime.engine.liveness import DEFAULT_LIVENESS_TIMEOUT_S, Liveness, check_liveness_timeout
from lockgate.runtime.engine.task import TaskConfig
from lockgate.runtime.engine.vertex_state import StateConfig
from lockgate.runtime.metrics.serving import PortRange


@dataclass(frozen=True)
class JobSpec:
    entrypoint: str
    keys: JobKeys
    parallelism: int
    state: StateConfig
    control_plane: ControlPlane
    secret: bytes = field(repr=False)
    args: tuple[tuple[str, str], ...] = ()
    mode: Mode = "exactly-once"
    unaligned_after_s: float | None = None  # exactly-once: alignment before a checkpoint goes unaligned
    bounded: bool = False
    batch_size: int = 512
    channel_capacity: int = DEFAULT_CHANNEL_CAPACITY
    in_flight_target_s: float | None = DEFAULT_IN_FLIGHT_TARGET_S
    # Seconds of silence (not even a heartbeat) after which an exchange channel fails its task.
    liveness_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S
    metrics_ports: PortRange | None = None  # each task's /metrics; None: not served
    metrics_host: str = "127.0.0.1"  # the address they listen on
    # Filled in by the job master for each launch:
    restore: RestorePoint | None = None
    trigger_revision: int | None = None
    launch: int = 0  # the coordinator's launch number, which every task's messages carry
    # Builds the graph in this process instead of importing `entrypoint` (in-process runs only).
    graph_factory: Callable[[], JobGraph] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_liveness_timeout(self.liveness_timeout_s, "liveness_timeout_s")

    def liveness(self) -> Liveness:
        return Liveness.from_timeout(self.liveness_timeout_s)

    def graph(self) -> JobGraph:
        if self.graph_factory is not None:
            return self.graph_factory()
        return build_graph(self.entrypoint, self.keys.job, dict(self.args))

    def task_config(self, index: int) -> TaskConfig:
        return TaskConfig(
            index,
            self.parallelism,
            self.state,
            self.mode,
            self.bounded,
            self.batch_size,
            self.in_flight_target_s,
            self.unaligned_after_s,
        )

    def for_launch(
        self, launch: int, restore: RestorePoint | None, trigger_revision: int, secret: bytes
    ) -> JobSpec:
        """This spec for one launch, with `secret`, the launch's own (`new_launch_secret`):
        a task of another launch can neither open an exchange channel to this one's nor
        acknowledge a checkpoint to its coordinator."""
        return replace(self, launch=launch, restore=restore, trigger_revision=trigger_revision, secret=secret)


def new_launch_secret() -> bytes:
    return secrets.token_bytes(32)
