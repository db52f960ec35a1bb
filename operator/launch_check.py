"""What the operator checks before it creates anything for a spec: at the spec's
acceptance, and again before a lost driver is relaunched, since the operator's
switches, the namespace's labels and its ServiceAccounts' marks may have changed
since the spec was accepted."""

from __future__ import annotations

from lockgate.operator.driver_pod import Launch, driver_pod
from lockgate.operator.job import Job
from lockgate.operator.job_policy import (
    check_job,
    check_namespace,
    check_own_service_account,
    check_service_account,
)
from lockgate.operator.spec import SpecError, StreamingJobSpec
from lockgate.operator.transition import max_parallelism


async def check_launch(job: Job, spec: StreamingJobSpec) -> None:
    """Raises SpecError naming the first thing refused: the job policy, what only
    building the driver's pod checks (memory below Spark's minimum, conf keys the
    operator sets), the ServiceAccount the spec names, the namespace's Pod Security
    (NamespaceNotRestrictedError)."""
    limit = max_parallelism(job, spec)
    if spec.replicas > limit:
        raise SpecError(f"spec.replicas {spec.replicas} exceeds the job's max parallelism {limit}")
    context, namespace = job.context, job.names.namespace
    check_job(spec, job.names, context.cluster, context.policy)
    driver_pod(job.names, spec, Launch(job.next_launch, limit, "latest", None), context.cluster)
    if spec.service_account_name is not None:
        annotations = await context.kube.service_account_annotations(namespace, spec.service_account_name)
        check_service_account(spec, namespace, annotations, context.policy)
    else:
        account = job.names.service_account
        check_own_service_account(job.names, await context.kube.service_account_owners(namespace, account))
    if not context.policy.allow_unrestricted_namespaces:
        check_namespace(namespace, await context.kube.namespace_labels(namespace), context.policy)
