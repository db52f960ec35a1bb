"""The driver's autoscaler, as the StreamingJob shows it: `status.autoscaler` is the
record the driver publishes (recommendation, the inputs it used, the last decision
and the bounded history of rescales it decided), and each new entry of that
history is an event (reason `Autoscaled`; a Warning when the rescale did not
happen). While the autoscaler is enabled it owns the running parallelism: a
parallelism within its bounds is the one desired, whatever spec.replicas (the
initial one) says."""

from __future__ import annotations

from lockgate.operator.conditions import MESSAGE_LIMIT
from lockgate.operator.job import Job
from lockgate.operator.spec import StreamingJobSpec
from lockgate.operator.status import AUTOSCALER_VIEW
from lockgate.runtime.autoscaling.status import Rescaling
from lockgate.runtime.failure_class import bounded

REASON = "Autoscaled"


def desired_parallelism(spec: StreamingJobSpec, running: int) -> int:
    """The parallelism the job should run at, seen from the spec in force."""
    autoscaler = spec.autoscaler
    top = autoscaler.max_replicas or spec.max_parallelism or running
    if autoscaler.enabled and autoscaler.min_replicas <= running <= top:
        return running
    return spec.replicas


async def observe_autoscaler(job: Job, spec: StreamingJobSpec) -> None:
    """Copy the driver's autoscaler record into status, with an event per new decision."""
    if not spec.autoscaler.enabled:
        return
    record = await job.context.etcd.autoscaler(job.keys)
    if record is None:
        return
    shown = () if job.status.autoscaler is None else job.status.autoscaler.history
    seen = max((entry.sequence for entry in shown), default=0)
    for entry in record.history:
        if entry.sequence > seen:
            (job.inform if entry.outcome == "rescaled" else job.warn)(REASON, _message(entry))
    await job.record(autoscaler=AUTOSCALER_VIEW.validate_python(record.to_json()))


def _message(entry: Rescaling) -> str:
    detail = f" ({entry.detail})" if entry.detail else ""
    return bounded(
        f"{entry.action} {entry.from_parallelism} -> {entry.to_parallelism}: {entry.outcome}{detail}; "
        f"{entry.reason}",
        MESSAGE_LIMIT,
    )
