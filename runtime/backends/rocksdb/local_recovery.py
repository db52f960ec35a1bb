"""Local recovery: a restore on the machine where the old subtasks ran takes their SST
files from its local disk instead of checkpoint storage, as Flink's local recovery does.

A closing RocksDB backend leaves the local checkpoint of its latest upload (hard
links to immutable SST files, `native_snapshot.KeptCheckpoint`) in the job's
local-recovery directory as `<instance>-chk-<n>/`, with a manifest written last:
per SST file the storage path it was uploaded to, its size, CRC-32 and SHA-256,
and the identity that proves the local file unchanged since the checksums were
computed from it (`file_identity.py`), if the upload's read proved one. A
restore asks `LocalCopies.fetch` for each shared file of a handle. A local file
is considered only when a manifest names it under the storage path `_metadata`
names, with the same size, CRC-32 and SHA-256 (`_metadata` is signed: these are
the bytes the job wrote), and it is

- *linked*: its identity is the proven one — hard-linked, not read;
- *checked*: otherwise hard-linked (copied across filesystems) and read once;
  its bytes must have the checksums, else the link is removed and the file
  downloaded;
- *downloaded*, as without local recovery, when there is no such local file or
  anything about it fails: from checkpoint storage, verified.

A manifest of another boot proves nothing (inode numbers are reused): its files
are checked. Any process on the machine may restore from the directory: what
proves a file is its identity, not who recorded it. Links are independent: two
restores may link one file, and RocksDB deleting its own link after a compaction
leaves the others. A backend deletes the directories left before it was created
when its first checkpoint completes: by then every subtask of its launch has
restored.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lockgate.runtime.backends.rocksdb.file_identity import FileIdentity, witnessed
from lockgate.runtime.backends.rocksdb.native_snapshot import KeptCheckpoint, SharedFile
from lockgate.runtime.snapshot.storage import CHUNK, CheckpointStorage, Digest, FileRef

MANIFEST = "local-copies.json"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

Fetched = Literal["linked", "checked", "downloaded"]

log = logging.getLogger(__name__)


def boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def leave(kept: KeptCheckpoint, root: Path, name: str) -> None:
    """Move `kept` into the local-recovery directory `root` as `name`, manifest last."""
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    shutil.move(str(kept.directory), str(target))
    files = {
        local_name: {
            "path": shared.path,
            "size": shared.size,
            "crc32": shared.crc32,
            "sha256": shared.sha256,
            "identity": None if shared.identity is None else shared.identity.to_json(),
        }
        for local_name, shared in kept.files.items()
    }
    partial = target / f"{MANIFEST}.partial"
    partial.write_text(json.dumps({"boot_id": boot_id(), "left_ns": time.time_ns(), "files": files}))
    os.replace(partial, target / MANIFEST)


def discard_left_before(root: Path, before_ns: int) -> None:
    """Delete what `root` holds that was left before `before_ns` (a directory
    without a manifest: by its own modification time)."""
    if not root.is_dir():
        return
    for directory in root.iterdir():
        try:
            left = int(json.loads((directory / MANIFEST).read_text())["left_ns"])
        except (OSError, ValueError, KeyError, TypeError):
            try:
                left = directory.stat().st_mtime_ns
            except OSError:
                continue
        if left < before_ns:
            shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class _LocalFile:
    path: Path
    shared: SharedFile  # identity None unless recorded in this boot


def _plain_name(name: str) -> bool:
    return bool(name) and name == Path(name).name and name not in (".", "..")


class LocalCopies:
    """The SST files a local-recovery directory holds, by the storage path each is a copy of."""

    def __init__(self, root: Path | None) -> None:
        self._files: dict[str, _LocalFile] = {}
        if root is not None and root.is_dir():
            boot = boot_id()
            for directory in sorted(root.iterdir()):
                self._read_manifest(directory, boot)

    def _read_manifest(self, directory: Path, boot: str | None) -> None:
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError):
            return  # not left completely: nothing of it is used
        try:
            this_boot = boot is not None and manifest["boot_id"] == boot
            for name, entry in manifest["files"].items():
                if not _plain_name(name):
                    raise ValueError(f"file name {name!r}")
                identity = entry["identity"]
                shared = SharedFile(
                    str(entry["path"]),
                    int(entry["size"]),
                    int(entry["crc32"]),
                    str(entry["sha256"]),
                    FileIdentity.from_json(identity) if this_boot and identity is not None else None,
                )
                known = self._files.get(shared.path)
                if known is None or (known.shared.identity is None and shared.identity is not None):
                    self._files[shared.path] = _LocalFile(directory / name, shared)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            log.warning("local recovery ignores %s: its manifest is malformed (%s)", directory, error)

    def __len__(self) -> int:
        return len(self._files)

    def fetch(
        self, storage: CheckpointStorage, snapshot_dir: str, ref: FileRef, target: Path
    ) -> tuple[Fetched, FileIdentity | None]:
        """Put the file `ref` names at `target`, from a local copy if one may be used (see
        the module's doc); how, and the identity that proves `target` holds its bytes."""
        path = storage.resolve(snapshot_dir, ref)
        local = self._files.get(path)
        if local is not None and (local.shared.size, local.shared.crc32, local.shared.sha256) == (
            ref.size,
            ref.crc32,
            ref.sha256,
        ):
            try:
                found = _linked(local, target) or _checked(local.path, ref, target)
                if found is not None:
                    return found
            except OSError as error:
                log.info("local copy %s of %s not used: %s", local.path, path, error)
            target.unlink(missing_ok=True)
        storage.download(snapshot_dir, ref, str(target))
        return "downloaded", None


def _linked(local: _LocalFile, target: Path) -> tuple[Fetched, FileIdentity] | None:
    identity = local.shared.identity
    if identity is None or FileIdentity.of(local.path) != identity:
        return None
    os.link(local.path, target)
    if FileIdentity.of(target) == identity:  # the very file: none put in its place since the check
        return "linked", identity
    target.unlink()
    return None


def _checked(source: Path, ref: FileRef, target: Path) -> tuple[Fetched, FileIdentity | None] | None:
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        shutil.copyfile(source, target)
    digest, identity = witnessed(target, functools.partial(_digest, target))
    if (digest.size, digest.crc32, digest.sha256) != (ref.size, ref.crc32, ref.sha256):
        log.warning("local copy %s does not hold the bytes of %s: downloading it", source, ref.path)
        target.unlink()
        return None
    return "checked", identity


def _digest(path: Path) -> Digest:
    digest = Digest()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest
