"""etcd's TLS and user options, shared by every command that connects to etcd
(the CLI, the driver, the operator)."""

from __future__ import annotations

import argparse
import os

from lockgate.runtime.coordination.etcd import EtcdConfig


def add_security(group: argparse._ActionsContainer) -> None:
    group.add_argument("--etcd-ca", help="CA certificate file for https endpoints")
    group.add_argument("--etcd-cert", help="client certificate file")
    group.add_argument("--etcd-key", help="client key file")
    group.add_argument("--etcd-user", help="etcd user (the password comes from $LOCKGATE_ETCD_PASSWORD)")


def config_of(endpoints: str, arguments: argparse.Namespace) -> EtcdConfig:
    """`endpoints` with the options `add_security` added."""
    return EtcdConfig.from_url(
        endpoints,
        ca_file=arguments.etcd_ca,
        cert_file=arguments.etcd_cert,
        key_file=arguments.etcd_key,
        username=arguments.etcd_user,
        password=os.environ.get("LOCKGATE_ETCD_PASSWORD") if arguments.etcd_user else None,
    )
