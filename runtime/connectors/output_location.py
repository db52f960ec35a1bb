"""Where a sink writes: checked before anything is written there.

A missing directory is made when its nearest existing ancestor is a directory
(as Flink's FileSink does); a location under a file, under nothing that exists
(an object store's missing bucket: buckets are never made), or that takes no
file, is refused with an `OutputLocationError` naming the URL and the cause.
"""

from __future__ import annotations

import contextlib
import posixpath
from typing import Any

import fsspec
from lockgate.runtime.storage_url import StorageUrlError, check_storage_url


class OutputLocationError(ValueError):
    """A sink's output location cannot be written."""


def check_url(url: str) -> None:
    """Refuse, without touching storage, a URL whose file system is unknown or not
    installed, or a relative path (each executor would resolve it on its own); what is
    at the location is checked as it opens (`open_directory`)."""
    try:
        check_storage_url(url, process_local=True, on_this_host=False)
    except StorageUrlError as error:
        raise OutputLocationError(str(error)) from None


def open_directory(url: str, probe: str) -> tuple[Any, str]:
    """The file system and directory of `url`, the directory made if missing, checked
    by writing and deleting the empty file `probe` there. `probe` is named as a hidden
    file of the job, so a recovering writer may delete it first: not an error."""
    check_url(url)
    fs, root = fsspec.core.url_to_fs(url)
    directory = root.rstrip("/") or root
    try:
        existing = directory  # the nearest location that exists, the directory or above it
        while not fs.exists(existing):
            parent = posixpath.dirname(existing)
            if parent in (existing, ""):
                raise OutputLocationError(
                    f"{url}: neither it nor any location above it exists (is the bucket missing?)"
                )
            existing = parent
        if not fs.isdir(existing):
            what = "the output location" if existing == directory else f"{existing}, above it,"
            raise OutputLocationError(f"{url}: {what} is a file, not a directory")
        if existing != directory:
            fs.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise OutputLocationError(
            f"{url}: cannot make the output directory ({type(error).__name__}: {error})"
        ) from error
    path = f"{directory}/{probe}"
    try:
        with fs.open(path, "wb"):
            pass
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path)
    except OSError as error:
        raise OutputLocationError(
            f"{url}: the output directory takes no files ({type(error).__name__}: {error}); "
            "give a location this job may write"
        ) from error
    return fs, directory


def paths_in(fs: Any, directory: str) -> list[str]:
    """The paths of what `directory` holds now (a file: the file itself). On an object store a "directory"
    is a key prefix and exists only while something is under it: a new or
    emptied one lists as nothing, not as an error. Other processes write here
    (every subtask, every launch): a listing this process cached is stale."""
    fs.invalidate_cache(directory)
    try:
        return [str(path).rstrip("/") for path in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return []
