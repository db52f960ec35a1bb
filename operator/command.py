"""`lockgate operator`: the Kubernetes operator for StreamingJobs, as a command.

Registered with the `lockgate` command line through the `lockgate.commands`
entry point, so the runtime's CLI never imports the operator; what the command
runs is `service.py`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from lockgate.operator.job_policy import PRIVILEGED_OPTION, STORAGE_OPTION, UNRESTRICTED_NAMESPACES_OPTION
from lockgate.operator.metrics import OPERATOR_METRICS_PORT
from lockgate.runtime.coordination import etcd_options
from lockgate.runtime.driver import option_types


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
        "--etcd-enable-auth",
        action="store_true",
        help="at start, if etcd's authentication is off: add the user root with --etcd-user root's "
        "password and enable it (for an etcd that admits only clients with a certificate of its CA)",
    )
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
    trust.add_argument(
        UNRESTRICTED_NAMESPACES_OPTION,
        action="store_true",
        help="run StreamingJobs in namespaces that do not enforce Pod Security restricted "
        "(there a job's code can create any pod its driver's ServiceAccount may)",
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
    command.set_defaults(handler=lambda arguments: _run_operator(command, arguments))


def _check_enable_auth(command: argparse.ArgumentParser, arguments: argparse.Namespace) -> None:
    """--etcd-enable-auth. Until auth is on etcd lets any client it admits do
    anything: only an etcd that admits certificate holders alone may be switched so."""
    endpoints = [e.strip() for e in (arguments.etcd or "").split(",") if e.strip()]
    if arguments.etcd_enable_auth and (
        not arguments.etcd_cert or not all(e.startswith("https://") for e in endpoints)
    ):
        command.error(
            f"--etcd-enable-auth with --etcd {arguments.etcd}: enabling etcd's authentication needs "
            "https endpoints and a client certificate (--etcd-cert, --etcd-key), an etcd that admits "
            "no client without one (--client-cert-auth)"
        )


def _run_operator(command: argparse.ArgumentParser, arguments: argparse.Namespace) -> int:
    _check_enable_auth(command, arguments)
    # kopf and the Kubernetes client take about 0.3 s to import: only `lockgate
    # operator` pays it, not every `lockgate run`, whose parser lists this command.
    try:
        from lockgate.operator.service import run_operator  # noqa: PLC0415 — see above
    except ImportError as error:
        if error.name is None or error.name.split(".")[0] not in ("kopf", "kubernetes"):
            raise
        raise ValueError(
            f"the operator needs {error.name.split('.')[0]}, which is not installed: "
            "pip install 'lockgate[operator]'"
        ) from None
    return run_operator(arguments)
