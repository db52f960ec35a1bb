"""A change of `spec.replicas` alone, carried out by the running driver: it stops
its tasks at a checkpoint and starts them again at the new parallelism, keeping
its pod, JVM and executors (`lockgate.runtime.coordination.rescale_queue`).

Where the driver refuses (a target above maxParallelism, executors that do not
come), fails (the rescale's checkpoint did not complete) or does not answer in
time, the operator says why in an event and falls back to savepoint, stop and
restart with the new spec.
"""

from __future__ import annotations

from lockgate.operator.conditions import set_condition
from lockgate.operator.job import Job
from lockgate.operator.spec import StreamingJobSpec
from lockgate.runtime.coordination.etcd import EtcdAccessError, EtcdUnavailableError
from lockgate.runtime.coordination.rescale_queue import RESERVE_TIMEOUT_S

RESCALE_TIMEOUT_S = RESERVE_TIMEOUT_S + 60.0
"""How long the operator waits for the driver's answer: the executors' reservation,
then a checkpoint and the relaunch of the tasks."""

TAKEN_UP_S = 20.0
"""How long the running driver has to take a request up: one that does not (an
earlier version, a driver that stopped serving) gets the long way at once."""

REASON = "InPlaceRescale"


async def rescale_in_place(job: Job, new: StreamingJobSpec) -> bool:
    """Ask the running driver for `new.replicas`; True once it runs at them, False
    (having said why) when the change must go the long way."""
    target, generation = new.replicas, job.generation
    message = f"generation {generation}: the running driver rescales to parallelism {target}"
    job.inform("RescalingInPlace", message)
    progressing = set_condition(
        job.status.conditions,
        "Progressing",
        true=True,
        reason=REASON,
        message=message,
        generation=generation,
    )
    await job.record(conditions=progressing)
    try:
        result = await job.context.etcd.rescale(
            job.keys,
            target,
            generation=generation,
            request_id=f"generation-{generation}",
            timeout_s=RESCALE_TIMEOUT_S,
            taken_up_s=TAKEN_UP_S,
        )
    except TimeoutError:
        why = f"the driver did not take it up in {TAKEN_UP_S:.0f} s or end it in {RESCALE_TIMEOUT_S:.0f} s"
    except (EtcdUnavailableError, EtcdAccessError) as error:
        why = f"etcd could not be asked: {error}"
    else:
        if result.status == "rescaled":
            await job.record(replicas=result.parallelism)
            took = ""
            if result.stopped_ms is not None and result.relaunched_ms is not None:
                took = (
                    f", {(result.relaunched_ms - result.stopped_ms) / 1000:.1f} s after the old tasks stopped"
                )
            job.inform(
                "RescaledInPlace",
                f"parallelism {result.parallelism}: tasks restarted from checkpoint "
                f"{result.checkpoint_id}{took}",
            )
            return True
        why = f"the driver {result.status} it: {result.reason}"
    job.warn(
        "InPlaceRescaleFallback",
        f"parallelism {target} not reached in place ({why}); carrying it out by savepoint, stop and restart",
    )
    return False
