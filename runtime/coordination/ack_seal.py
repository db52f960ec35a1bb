"""Acknowledgements the coordinator can trust: sealed by the run's tasks.

A task's acknowledgement names the files of its state, and the coordinator
signs those names into `_metadata` with the job's snapshot key. Acknowledgements
travel through etcd, which other jobs' code may reach; so each carries an
HMAC-SHA256, keyed by the run's secret (which reaches the tasks in their
closures, never etcd), over its etcd key and its record. The coordinator
refuses one without it before taking a file name from it: nothing written to
etcd by another hand gets signed.
"""

from __future__ import annotations

import hashlib
import hmac

MAC_PREFIX = b"\nmac:"


class AckNotSealedError(ValueError):
    """An acknowledgement without this run's seal."""


def ack_key(secret: bytes) -> bytes:
    """The key of acknowledgements, derived from the run's secret (apart from the exchange's)."""
    return hmac.new(secret, b"lockgate acknowledgements", hashlib.sha256).digest()


def seal(key: bytes, etcd_key: bytes, record: bytes) -> bytes:
    mac = hmac.new(key, etcd_key + b"\0" + record, hashlib.sha256).hexdigest()
    return record + MAC_PREFIX + mac.encode("ascii")


def unseal(key: bytes, etcd_key: bytes, value: bytes) -> bytes:
    """The record of a sealed value; raises AckNotSealedError unless this run sealed it here."""
    record, found, mac = value.rpartition(MAC_PREFIX)
    if not found:
        raise AckNotSealedError("it carries no seal")
    expected = hmac.new(key, etcd_key + b"\0" + record, hashlib.sha256).hexdigest().encode("ascii")
    if not hmac.compare_digest(mac, expected):
        raise AckNotSealedError("its seal is not this run's")
    return record
