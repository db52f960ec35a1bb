"""A launch's tasks as threads of this process: the job master's `Stage` without Spark.

The tasks are the same as on Spark (one `Task` per subtask, the TCP exchange
with the launch's secret, the launch's own line to the coordinator); only
where they run differs. For tests of the job master, and jobs too small for a
cluster.
"""

from __future__ import annotations

import threading

from lockgate.runtime.coordination.ack_seal import ack_key
from lockgate.runtime.engine.control import CheckpointControl
from lockgate.runtime.engine.job_spec import JobSpec
from lockgate.runtime.engine.local_runner import run_local


class ThreadStage:
    def __init__(self) -> None:
        self._cancelled = threading.Event()  # each run replaces it with its own

    def run(self, spec: JobSpec) -> None:
        cancelled = self._cancelled = threading.Event()
        run_local(
            spec.graph(),
            [spec.task_config(i) for i in range(spec.parallelism)],
            lambda index: CheckpointControl(
                spec.control_plane, spec.keys, index, spec.launch, ack_key=ack_key(spec.secret)
            ),
            spec.restore,
            channel_capacity=spec.channel_capacity,
            trigger_revision=spec.trigger_revision,
            cancelled=cancelled,
            exchange="tcp",
            liveness=spec.liveness(),
            # Each task builds its own graph, as a Spark task imports the job itself:
            # a function object's attributes are never shared between subtasks.
            task_graph=lambda _index: spec.graph(),
        )

    # Threads cannot be killed: one in the job's code that does not return is
    # left behind after this long, rather than holding the run forever.
    stop_wait_s = 5.0

    def cancel(self) -> None:
        self._cancelled.set()
