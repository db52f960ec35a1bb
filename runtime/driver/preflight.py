"""What a run checks before it starts anything expensive (etcd, Spark): the job
builds, its sources and sinks can reach their locations, and a savepoint it
names fits it. A refusal is recorded as the job's
status when the run has an etcd of its own to record it in (a driver launched by
the operator always has), so whoever watches the job sees why it did not start."""

from __future__ import annotations

import logging

from lockgate.runtime.api.connectors import JobIdentity
from lockgate.runtime.api.entrypoint import build_graph
from lockgate.runtime.api.graph import JobGraph
from lockgate.runtime.api.validation import JobDefinitionError, validate_connectors
from lockgate.runtime.coordination.cancellation import run_with_bounded_shutdown
from lockgate.runtime.coordination.etcd import Etcd, EtcdConfig, EtcdUnavailableError
from lockgate.runtime.coordination.job_status import record_refusal
from lockgate.runtime.driver.options import JobSettings, OptionError
from lockgate.runtime.engine.job_master import EarlierRunError
from lockgate.runtime.engine.restore_check import (
    MaxParallelismMismatchError,
    NonRestoredStateError,
    check_restorable,
)
from lockgate.runtime.snapshot.metadata import read_metadata
from lockgate.runtime.snapshot.storage import CheckpointStorage, SnapshotCorruptError
from lockgate.runtime.spec.manifest import ManifestError
from lockgate.runtime.storage_url import StorageUrlError, check_storage_url

log = logging.getLogger(__name__)

REFUSED_INPUT: tuple[type[Exception], ...] = (
    OptionError,
    ManifestError,
    JobDefinitionError,
    NonRestoredStateError,
    MaxParallelismMismatchError,
    SnapshotCorruptError,  # the savepoint the user named
    EarlierRunError,  # the job id's earlier checkpoints, about which the user said nothing
)
"""What the user gave cannot run: exit 2, the message, no traceback."""


def _check_savepoint(settings: JobSettings, graph: JobGraph) -> None:
    """The named savepoint is signed by the job's key (or vouched for) and its state
    fits the job (its files are verified at launch)."""
    if settings.from_savepoint is None:
        return
    storage = CheckpointStorage(settings.from_savepoint)
    trust = settings.trust
    check_restorable(
        settings.from_savepoint,
        read_metadata(
            storage, storage.root, trust.key, trust_unsigned=trust.unsigned_allowed(settings.from_savepoint)
        ),
        graph,
        settings.max_parallelism,
        allow_non_restored_state=settings.allow_non_restored_state,
        parallelism=settings.parallelism,
    )


def _check_storage(settings: JobSettings) -> None:
    """The storage flags' protocols, now that the job's module registered any
    filesystem of its own (the flags' syntax argparse checked)."""
    for flag, url in (
        ("--checkpoint-dir", settings.checkpoint_dir),
        ("--savepoint-dir", settings.savepoint_dir),
    ):
        try:
            check_storage_url(url)
        except StorageUrlError as error:
            raise OptionError(f"argument {flag}: {error}") from None


def _check_inputs(settings: JobSettings, graph: JobGraph) -> None:
    """A source with nothing to read ends a run that reads to the end at once, with
    nothing written: refused. An unbounded run may be waiting for its input: warned."""
    for vertex in graph.sources:
        source = vertex.operator
        problem = source.missing_input()
        if problem is None:
            continue
        if settings.bounded or source.bounded:
            raise JobDefinitionError(f"source {vertex.name!r} would read nothing: {problem}")
        log.warning("source %r has nothing to read yet: %s", vertex.name, problem)


def preflight(settings: JobSettings, etcd: EtcdConfig | None) -> JobGraph:
    """The job's graph, built, its connectors validated, and checked against the
    savepoint it restores; a refusal is recorded in `etcd` (when given) and raised."""
    keys = settings.keys
    try:
        graph = build_graph(settings.entrypoint, keys.job, settings.args)
        _check_storage(settings)
        validate_connectors(graph, JobIdentity(keys.namespace, keys.job))
        _check_inputs(settings, graph)
        _check_savepoint(settings, graph)
    except REFUSED_INPUT as error:
        if etcd is not None:
            run_with_bounded_shutdown(_record(etcd, settings, error))
        raise
    return graph


async def _record(config: EtcdConfig, settings: JobSettings, refusal: Exception) -> None:
    try:
        async with Etcd(config) as etcd:
            await record_refusal(etcd, settings.keys, settings.parallelism, refusal, settings.driver_name)
    except EtcdUnavailableError as error:
        log.warning("the job's refusal is not recorded in its status: %s", error)
