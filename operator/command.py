"""`lockgate operator`: the Kubernetes operator for StreamingJobs, as a command.

Registered with the `lockgate` command line through the `lockgate.commands`
entry point, so the runtime's CLI never imports the operator. Kubernetes
access comes from `KUBECONFIG` (or ~/.kube/config), else the in-cluster
service account."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
from typing import Any

import kopf
from kubernetes import client, config
from lockgate.operator.driver_pod import Cluster
from lockgate.operator.handlers import configure
from lockgate.operator.handlers import register as register_handlers
from lockgate.operator.job import OperatorContext
from lockgate.operator.job_etcd import JobEtcd
from lockgate.operator.job_policy import PRIVILEGED_OPTION, STORAGE_OPTION, JobPolicy
from lockgate.operator.kube import Kube
from lockgate.operator.metrics import OPERATOR_METRICS_PORT, OperatorMetrics
from lockgate.runtime.coordination import etcd_options
from lockgate.runtime.driver import option_types
from prometheus_client import start_http_server

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    command = commands.add_parser("operator", help="run the Kubernetes operator for StreamingJobs")
    command.add_argument(
        "--etcd", default=os.environ.get("LOCKGATE_ETCD"), help="etcd endpoints ($LOCKGATE_ETCD)"
    )
    scope = command.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    etcd = command.add_argument_group("etcd security")
    etcd_options.add_security(etcd)
    etcd.add_argument(
        "--etcd-tls-secret",
        metavar="NAME",
        help="a Secret with ca.crt, tls.crt and tls.key in each job's namespace, mounted into "
        "drivers and executors to reach etcd over TLS",
    )
    command.add_argument(
        "--checkpoint-storage",
        metavar="ROOT",
        help="the storage root: each namespace's jobs keep checkpoints and savepoints under ROOT/<namespace>",
    )
    trust = command.add_argument_group("what jobs may ask for (each off: see the security model)")
    trust.add_argument(
        PRIVILEGED_OPTION,
        action="store_true",
        help="pass any pod field, volume kind and Spark conf key of a StreamingJob to its pods",
    )
    trust.add_argument(
        STORAGE_OPTION,
        action="store_true",
        help="let a StreamingJob name checkpoint and savepoint locations outside ROOT/<namespace>",
    )
    command.add_argument(
        "--observe-interval",
        type=option_types.positive_seconds,
        default=5.0,
        metavar="DURATION",
        help="between status checks: 5s, 500ms, 1m30s, or plain seconds (default 5s)",
    )
    command.add_argument("--peering", help="kopf peering name: run several replicas, one active")
    command.add_argument(
        "--priority",
        type=int,
        help="peering priority; the highest is active (default: random: peers of equal priority all pause)",
    )
    command.add_argument(
        "--metrics-port",
        type=int,
        default=OPERATOR_METRICS_PORT,
        help=f"Prometheus metrics port (default {OPERATOR_METRICS_PORT}; 0: none)",
    )
    command.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    command.set_defaults(handler=run_operator)


USER_AGENT = "lockgate-operator"  # audit logs (and the tests) tell the operator's calls by it


def _kubernetes() -> client.ApiClient:
    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    api.user_agent = USER_AGENT
    return api


def run_operator(arguments: argparse.Namespace) -> int:
    if not arguments.etcd:
        raise ValueError("--etcd (or $LOCKGATE_ETCD) is required: the operator talks to jobs through etcd")
    if not arguments.namespace and not arguments.all_namespaces:
        raise ValueError("name the namespaces to watch (--namespace NS, repeatable) or --all-namespaces")
    logging.getLogger().setLevel(logging.INFO)
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    etcd = etcd_options.config_of(arguments.etcd, arguments)
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
    policy = JobPolicy(arguments.allow_privileged_pods, arguments.allow_custom_storage_roots)
    context = OperatorContext(Kube(_kubernetes()), JobEtcd(etcd), cluster, policy, metrics=metrics)
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
