"""etcd's TLS and user options, shared by every command that connects to etcd
(the CLI, the driver, the operator)."""

from __future__ import annotations

import argparse
import os

from lockgate.runtime.coordination.etcd import EtcdConfig, EtcdConfigError

PASSWORD_ENV = "LOCKGATE_ETCD_PASSWORD"  # not a flag: flags show in `ps` and in pod specs


def add_security(group: argparse._ActionsContainer) -> None:
    group.add_argument("--etcd-ca", help="CA certificate file for https endpoints")
    group.add_argument("--etcd-cert", help="client certificate file")
    group.add_argument("--etcd-key", help="client key file")
    group.add_argument("--etcd-user", help=f"etcd user (the password comes from ${PASSWORD_ENV})")


def config_of(endpoints: str, arguments: argparse.Namespace) -> EtcdConfig:
    """`endpoints` with the options `add_security` added."""
    if arguments.etcd_user and not os.environ.get(PASSWORD_ENV):
        raise EtcdConfigError(f"--etcd-user {arguments.etcd_user} needs its password in ${PASSWORD_ENV}")
    return EtcdConfig.from_url(
        endpoints,
        ca_file=arguments.etcd_ca,
        cert_file=arguments.etcd_cert,
        key_file=arguments.etcd_key,
        username=arguments.etcd_user,
        password=os.environ.get(PASSWORD_ENV) if arguments.etcd_user else None,
    )
