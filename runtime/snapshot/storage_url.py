"""Whether a checkpoint or savepoint URL can work before anything is written to it.

The driver and every task open the same URL, each in its own process and maybe on
its own machine: a relative path would name a different directory in each, and
`memory://` a different store. An unknown protocol or a filesystem whose package is
missing would fail only at the first checkpoint, after the job has started.
"""

from __future__ import annotations

import fsspec
from fsspec.core import split_protocol
from fsspec.registry import known_implementations

LOCAL = (None, "file", "local")
PROCESS_LOCAL = ("memory",)
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
"""Protocols whose filesystem comes with an extra of lockgate: `pip install 'lockgate[s3]'`."""


class StorageUrlError(ValueError):
    """The URL cannot hold a job's checkpoints; the message says why and what works."""


def check_storage_url(url: str, *, installed: bool = True) -> str:
    """`url` if every process of a job can use it; `installed`: also that its
    filesystem's package is installed here."""
    protocol, path = split_protocol(url)
    if protocol in LOCAL:
        if not path.startswith("/"):
            raise StorageUrlError(
                f"{url!r} is a relative path: the driver and every task must find the same "
                "directory; give an absolute one, e.g. file:///data/checkpoints, or s3://bucket/path"
            )
        return url
    if protocol in PROCESS_LOCAL:
        raise StorageUrlError(
            f"{url!r} lives in one process, and a job's tasks run in others: use file:///absolute/path "
            "on a shared volume, or an object store (s3://, gs://)"
        )
    if installed:
        _check_installed(url, str(protocol))
    elif protocol not in fsspec.available_protocols():
        raise StorageUrlError(_unknown(url, str(protocol)))
    return url


def _check_installed(url: str, protocol: str) -> None:
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise StorageUrlError(_unknown(url, protocol)) from None
    except ImportError as error:
        extra = EXTRAS.get(protocol)
        hint = f"pip install 'lockgate[{extra}]'" if extra else str(error)
        package = known_implementations[protocol]["class"].split(".")[0]
        raise StorageUrlError(f"{url!r} needs {package}: {hint}") from None


def _unknown(url: str, protocol: str) -> str:
    return (
        f"{url!r}: no storage is known for protocol {protocol!r}; use file:///absolute/path, "
        "s3://bucket/path (pip install 'lockgate[s3]'), gs://bucket/path (pip install 'lockgate[gcs]') "
        "or another fsspec protocol"
    )
