"""The options every command that talks to etcd takes."""

from __future__ import annotations

import argparse
import os

from lockgate.runtime.coordination.etcd import EtcdConfig
from lockgate.runtime.coordination.keys import JobKeys


def add(command: argparse.ArgumentParser) -> None:
    command.add_argument("job_id", metavar="JOB-ID", help="the job's id")
    etcd = command.add_argument_group("etcd")
    etcd.add_argument(
        "--etcd",
        default=os.environ.get("LOCKGATE_ETCD"),
        help="comma-separated etcd endpoints, http(s)://host:port (default: $LOCKGATE_ETCD)",
    )
    etcd.add_argument("--namespace", default="default", help="the job's namespace (default: default)")
    etcd.add_argument("--etcd-ca", help="CA certificate file for https endpoints")
    etcd.add_argument("--etcd-cert", help="client certificate file")
    etcd.add_argument("--etcd-key", help="client key file")
    etcd.add_argument("--etcd-user", help="etcd user (the password comes from $LOCKGATE_ETCD_PASSWORD)")


def config(arguments: argparse.Namespace) -> EtcdConfig:
    if not arguments.etcd:
        raise ValueError("no etcd given: pass --etcd http://host:port or set LOCKGATE_ETCD")
    return EtcdConfig.from_url(
        arguments.etcd,
        ca_file=arguments.etcd_ca,
        cert_file=arguments.etcd_cert,
        key_file=arguments.etcd_key,
        username=arguments.etcd_user,
        password=os.environ.get("LOCKGATE_ETCD_PASSWORD") if arguments.etcd_user else None,
    )


def job_keys(arguments: argparse.Namespace) -> JobKeys:
    return JobKeys(arguments.namespace, arguments.job_id)
