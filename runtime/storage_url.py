"""Whether a URL can hold a job's files, checked before anything is written to it:
checkpoint and savepoint storage, a sink's output, a source's dead letters.

The driver and every task open the same URL, each in its own process and maybe on
its own machine: a relative path would name a different directory in each. An
unknown protocol, or a filesystem whose package is missing, would fail only when
the job first writes there, long after it started.
"""

from __future__ import annotations

import os
import posixpath

import fsspec
from fsspec.core import split_protocol
from fsspec.registry import known_implementations

LOCAL = (None, "file", "local")
PROCESS_LOCAL = ("memory",)
KERNEL_FILESYSTEMS = ("/proc", "/sys", "/dev")
"""The kernel's views of processes and devices: never a place for a job's files."""
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
"""Protocols whose filesystem comes with an extra of lockgate: `pip install 'lockgate[s3]'`."""


class StorageUrlError(ValueError):
    """The URL cannot hold the job's files; the message says why and what works."""


def check_storage_url(
    url: str,
    *,
    installed: bool = True,
    process_local: bool = False,
    protocol_known: bool = True,
    on_this_host: bool = True,
) -> str:
    """`url`, if every process of a job can reach it. `installed`: also that its
    filesystem's package is installed here. `process_local`: `memory://` passes
    (an in-process run's sinks; never checkpoints, which tasks in other processes write).
    `protocol_known=False`: the protocol is not checked yet — a job may register its
    own filesystem when it is imported, so a flag's protocol is checked after that
    (`check_storage_protocol`). `on_this_host`: a local path is used from this host,
    so what is there now is checked too (a directory or nothing yet, not in /proc, /sys
    or /dev); False where that is checked later or by another host (the operator
    reading a spec; a sink, whose location is checked as it opens)."""
    protocol, path = split_protocol(url)
    if protocol in LOCAL:
        if not path.startswith("/"):
            raise StorageUrlError(
                f"{url}: a relative path names a different directory on each executor; give an "
                "absolute path or a URL such as file:///data/out or s3://bucket/out"
            )
        if on_this_host:
            _check_local_directory(url, posixpath.normpath(path))
        return url
    if protocol in PROCESS_LOCAL and not process_local:
        raise StorageUrlError(
            f"{url}: memory:// lives in one process, and a job's tasks run in others; use "
            "file:///absolute/path on a shared volume, or an object store (s3://, gs://)"
        )
    if not protocol_known:
        return url
    if installed:
        _check_installed(url, str(protocol))
    elif protocol not in fsspec.available_protocols():
        raise StorageUrlError(_unknown(url, str(protocol), f"Protocol not known: {protocol}"))
    return url


def _check_local_directory(url: str, path: str) -> None:
    """A local path this host uses can be a directory of the job's files: not in the
    kernel's filesystems, not a file or under one."""
    # Where the path leads once symlinks are followed (and `//`, which normpath keeps, is one `/`).
    resolved = os.path.realpath(path)
    kernel = next(
        (
            root
            for root in KERNEL_FILESYSTEMS
            for p in (path, resolved)
            if p == root or p.startswith(root + "/")
        ),
        None,
    )
    if kernel is not None:
        leads = "" if resolved == path or path.startswith(kernel) else f" (it leads to {resolved})"
        raise StorageUrlError(
            f"{url}: {kernel} is the kernel's view of processes and devices{leads}, which takes no files; "
            "give a directory on a disk or volume, or an object store (s3://, gs://)"
        )
    existing = path  # the nearest location that exists: the path or above it
    while not os.path.lexists(existing):
        existing = posixpath.dirname(existing)
    if not os.path.isdir(existing):
        what = "it is a file" if existing == path else f"{existing}, above it, is a file"
        raise StorageUrlError(
            f"{url}: {what}, not a directory; give a directory (made if missing) for the job's files"
        )


def syntax_of_storage_url(url: str) -> str:
    """What can be told of `url` before the job is imported (an argparse type)."""
    return check_storage_url(url, protocol_known=False)


def _check_installed(url: str, protocol: str) -> None:
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError as error:
        raise StorageUrlError(_unknown(url, protocol, str(error))) from None
    except ImportError as error:
        extra = EXTRAS.get(protocol)
        package = known_implementations[protocol]["class"].split(".")[0]
        hint = f"pip install 'lockgate[{extra}]'" if extra else f"install {package}"
        raise StorageUrlError(
            f"{url}: the file system for {protocol}:// is not installed ({error}): {hint}"
        ) from None


def _unknown(url: str, protocol: str, error: str) -> str:
    return (
        f"{url}: unknown protocol {protocol!r} ({error}); use file:///absolute/path, s3://bucket/path "
        "(pip install 'lockgate[s3]'), gs://bucket/path (pip install 'lockgate[gcs]') or another "
        "fsspec protocol"
    )
