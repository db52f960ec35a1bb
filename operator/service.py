"""The operator's process: kopf's operator with the StreamingJob handlers, its
metrics server, Kubernetes access from `KUBECONFIG` (or ~/.kube/config), else
the in-cluster service account."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
from typing import Any

import kopf
from kubernetes import client, config
from lockgate.operator.driver_pod import Cluster
from lockgate.operator.handlers import configure
from lockgate.operator.handlers import register as register_handlers
from lockgate.operator.job import OperatorContext
from lockgate.operator.job_etcd import JobEtcd
from lockgate.operator.job_policy import JobPolicy
from lockgate.operator.kube import Kube
from lockgate.operator.metrics import OperatorMetrics
from lockgate.runtime.coordination import etcd_options
from lockgate.runtime.coordination.etcd_auth import enable_auth
from prometheus_client import start_http_server

log = logging.getLogger(__name__)

USER_AGENT = "lockgate-operator"  # audit logs (and the tests) tell the operator's calls by it


def run_operator(arguments: argparse.Namespace) -> int:
    if not arguments.etcd:
        raise ValueError("--etcd (or $LOCKGATE_ETCD) is required: the operator talks to jobs through etcd")
    if not arguments.namespace and not arguments.all_namespaces:
        raise ValueError("name the namespaces to watch (--namespace NS, repeatable) or --all-namespaces")
    if not any(getattr(arguments, name, None) for name in ("log_level", "verbose", "debug")):
        logging.getLogger().setLevel(logging.INFO)  # a service logs what it does unless told otherwise
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    etcd = etcd_options.config_of(arguments.etcd, arguments)
    if arguments.etcd_enable_auth and asyncio.run(enable_auth(etcd)):  # command.py checked it is safe
        log.info("etcd authentication enabled: user root; each job gets a user of its own")
    metrics = OperatorMetrics()
    if arguments.metrics_port:
        start_http_server(arguments.metrics_port, registry=metrics.registry)
    job_users = etcd.username is not None
    if not job_users:
        log.warning(
            "etcd without --etcd-user: every job's driver and tasks can read and rewrite every other "
            "job's etcd keys. Enable etcd auth and run the operator as a user with etcd's root role: "
            "each job then gets a user of its own, reaching only its keys"
        )
    cluster = Cluster(
        ",".join(etcd.endpoints), arguments.checkpoint_storage, arguments.etcd_tls_secret, job_users
    )
    policy = JobPolicy(
        arguments.allow_privileged_pods,
        arguments.allow_custom_storage_roots,
        arguments.allow_unrestricted_namespaces,
    )
    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    api.user_agent = USER_AGENT
    context = OperatorContext(Kube(api), JobEtcd(etcd), cluster, policy, metrics=metrics)
    register_handlers(registry, context, observe_every_s=arguments.observe_interval)
    log.info("lockgate operator: etcd %s, %s", arguments.etcd, arguments.namespace or "all namespaces")
    asyncio.run(
        kopf.operator(
            registry=registry,
            settings=configure(kopf.OperatorSettings()),
            clusterwide=arguments.all_namespaces,
            namespaces=arguments.namespace,
            standalone=arguments.peering is None,
            peering_name=arguments.peering,
            priority=arguments.priority if arguments.priority is not None else random.randrange(1, 2**31),
            liveness_endpoint=arguments.liveness,
        )
    )
    return 0
