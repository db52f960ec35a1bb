"""Every kopf registration of the operator, and nothing else: the work is in
`reconcile`, which raises the operator's own errors (`errors.py`) and posts
Events through `Job.events`; this module alone turns them into kopf's. Errors:
a spec the operator refuses is permanent (kopf stops retrying that change),
unless what refuses it lies outside the spec (the namespace's Pod Security
label): then, as "not yet", etcd or API trouble, it is retried after a delay."""

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
from lockgate.runtime.coordination.etcd import EtcdAccessError, EtcdUnavailableError

RESOURCE = (GROUP, VERSION, PLURAL)
# kopf's bookkeeping (finalizer, handled spec, handler progress) under the
# operator's own domain. Earlier operators left theirs under kopf's default:
# read from there until rewritten, and their finalizer removed (it would hold a
# deleted job forever: no operator removes it any more).
FINALIZER = f"{GROUP}/finalizer"
LEGACY_PREFIX = "kopf.zalando.org"
LEGACY_FINALIZER = f"{LEGACY_PREFIX}/KopfFinalizerMarker"


class _DiffBaseCarriedOver(kopf.AnnotationsDiffBaseStorage):
    """The last handled spec under lockgate.dev/; one an earlier operator stored
    under kopf's default prefix is read until the next store moves it here."""

    def __init__(self) -> None:
        super().__init__(prefix=GROUP)
        self._legacy = kopf.AnnotationsDiffBaseStorage(prefix=LEGACY_PREFIX)

    def _legacy_keys(self, body: kopf.Body) -> set[str]:
        return set(self._legacy.make_keys(self._legacy.key, body=body))

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        self.remove_annotations(essence, self._legacy_keys(body))
        return essence

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return super().fetch(body=body) or self._legacy.fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        super().store(body=body, patch=patch, essence=essence)
        for key in self._legacy_keys(body) & set(body.metadata.annotations):
            patch.metadata.annotations[key] = None


def configure(settings: kopf.OperatorSettings) -> kopf.OperatorSettings:
    """The operator's kopf settings: its bookkeeping under lockgate.dev/; a job's
    Events are the transitions the operator posts, not kopf's log lines (a timer
    that observes every few seconds would bury them)."""
    settings.posting.loggers = False
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = _DiffBaseCarriedOver()
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
    job = Job(body, context, KopfEvents(body))
    try:
        try:
            async with context.lock(job.names):
                await job.refresh_status()
                await work(job)
                if LEGACY_FINALIZER in (body.metadata.get("finalizers") or []):
                    await context.kube.drop_finalizer(dict(body), LEGACY_FINALIZER)
        except (EtcdUnavailableError, ApiException) as error:
            raise kopf.TemporaryError(f"{type(error).__name__}: {error}", delay=5) from error
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
