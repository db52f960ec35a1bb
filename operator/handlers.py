"""Every kopf registration of the operator, and nothing else: the work is in
`reconcile`, which raises the operator's own errors (`errors.py`) and posts
Events through `Job.events`; this module alone turns them into kopf's. Errors:
a spec the operator refuses is permanent (kopf stops retrying that change),
unless what refuses it lies outside the spec (the namespace's Pod Security
label): then, as "not yet", etcd or API trouble, it is retried after a delay; so is
a status the operator cannot read, with a Warning Event naming its field."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes.client import ApiException
from lockgate.operator import reconcile
from lockgate.operator.errors import RefusedError, RetryLaterError
from lockgate.operator.job import Job, OperatorContext
from lockgate.operator.naming import GROUP, PLURAL, VERSION
from lockgate.operator.status import StatusUnreadableError
from lockgate.runtime.coordination.etcd import EtcdAccessError, EtcdUnavailableError

RESOURCE = (GROUP, VERSION, PLURAL)
# kopf's bookkeeping (finalizer, handled spec, handler progress) under the operator's own domain.
FINALIZER = f"{GROUP}/finalizer"


def configure(settings: kopf.OperatorSettings) -> kopf.OperatorSettings:
    """The operator's kopf settings: its bookkeeping under lockgate.dev/; a job's
    Events are the transitions the operator posts, not kopf's log lines (a timer
    that observes every few seconds would bury them)."""
    settings.posting.loggers = False
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # A deleted job keeps its finalizer until its observing timer has exited; kopf
    # looks again after this many seconds (60 by default: a deletion that met a
    # running observation took a minute).
    settings.background.cancellation_polling = 0.5
    return settings


@dataclass(frozen=True)
class KopfEvents:
    """A job's Events, posted by kopf's poster (batched, retried, off the handler's path)."""

    body: kopf.Body

    def warn(self, reason: str, message: str) -> None:
        kopf.warn(self.body, reason=reason, message=message)

    def inform(self, reason: str, message: str) -> None:
        kopf.info(self.body, reason=reason, message=message)


async def _guarded(
    handler: str, context: OperatorContext, body: kopf.Body, work: Callable[[Job], Awaitable[None]]
) -> None:
    """Run `work` on the job, one handler at a time per job, on its current status;
    count the result; etcd and API trouble become a retry.

    kopf runs a job's timer beside its change handlers, and hands each a body
    that may predate the status this operator wrote a moment ago: without the
    lock and the fresh status, an observation could take a driver replaced by
    an upgrade for a lost one and replace it once more."""
    count = context.metrics.reconciles
    events = KopfEvents(body)
    try:
        try:
            job = Job(body, context, events)
            async with context.lock(job.names):
                await job.refresh_status()
                await work(job)
        except (EtcdUnavailableError, ApiException) as error:
            raise kopf.TemporaryError(f"{type(error).__name__}: {error}", delay=5) from error
        except StatusUnreadableError as error:  # nothing is done by a status that cannot be read
            events.warn("StatusUnreadable", str(error))
            raise kopf.TemporaryError(str(error), delay=60) from error
        except RetryLaterError as error:
            raise kopf.TemporaryError(str(error), delay=error.delay_s) from error
        except RefusedError as error:
            if error.recheck_s is not None:
                raise kopf.TemporaryError(str(error), delay=error.recheck_s) from error
            raise kopf.PermanentError(str(error)) from error
        except EtcdAccessError as error:  # the operator's etcd user: fixed by an admin, then retried
            raise kopf.TemporaryError(f"{type(error).__name__}: {error}", delay=60) from error
    except kopf.TemporaryError:
        count.labels(handler, "retry").inc()
        raise
    except kopf.PermanentError:
        count.labels(handler, "permanent").inc()
        raise
    except Exception:
        count.labels(handler, "error").inc()
        raise
    count.labels(handler, "ok").inc()


def register(registry: kopf.OperatorRegistry, context: OperatorContext, observe_every_s: float = 5.0) -> None:
    """Register the StreamingJob handlers on `registry`, working through `context`."""

    @kopf.on.create(*RESOURCE, registry=registry)
    async def created(body: kopf.Body, **_: Any) -> None:
        await _guarded("create", context, body, reconcile.on_create)

    @kopf.on.update(*RESOURCE, field="spec", registry=registry)
    async def changed(body: kopf.Body, old: Any, **_: Any) -> None:
        await _guarded("change", context, body, lambda job: reconcile.on_change(job, dict(old or {})))

    @kopf.timer(*RESOURCE, interval=observe_every_s, registry=registry)
    async def observed(body: kopf.Body, **_: Any) -> None:
        await _guarded("observe", context, body, reconcile.observe)

    @kopf.on.cleanup(registry=registry)
    async def closed(**_: Any) -> None:
        await context.etcd.close()

    @kopf.on.delete(*RESOURCE, registry=registry)
    async def deleted(body: kopf.Body, **_: Any) -> None:
        await _guarded("delete", context, body, reconcile.on_delete)
