"""The job's snapshot key: it signs every `_metadata`, and a restore trusts only
what it signed.

State is pickled, so restoring a snapshot runs whatever its files say. Each
`_metadata` therefore carries an HMAC-SHA256 of its body with a key of the job
(a Kubernetes Secret on a cluster, a file under the work directory locally),
and names each file by its SHA-256. A restore checks the signature before it
reads anything the metadata names, and each file against its SHA-256 as it
reads it: whoever can write to checkpoint storage but does not hold the key
cannot make a task deserialize a byte of their choosing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

KEY_BYTES = 32


class SnapshotKeyError(ValueError):
    """The key file cannot be used."""


@dataclass(frozen=True)
class SnapshotKey:
    secret: bytes = field(repr=False)
    source: str  # where it came from, for messages
    unsaved: Path | None = None
    """A local job's new key: written there by `persist` once the run really starts."""

    def sign(self, body: bytes) -> str:
        return hmac.new(self.secret, body, hashlib.sha256).hexdigest()

    def signed(self, body: bytes, signature: str) -> bool:
        return hmac.compare_digest(self.sign(body), signature)

    def persist(self) -> None:
        """Write a new local key, readable by this user only, before anything is signed with it."""
        if self.unsaved is None:
            return
        self.unsaved.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(self.unsaved, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise SnapshotKeyError(
                f"snapshot key file {self.unsaved} appeared while this run started: another run of the job?"
            ) from None
        with os.fdopen(descriptor, "w") as out:
            out.write(self.secret.hex() + "\n")


def read_key(path: Path) -> SnapshotKey:
    """The key in `path`: 64 hex digits (a Secret's value, a file of ours)."""
    try:
        text = path.read_text().strip()
    except OSError as error:
        raise SnapshotKeyError(f"snapshot key file {path}: {error.strerror or error}") from None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != KEY_BYTES:
        raise SnapshotKeyError(f"snapshot key file {path}: must hold {2 * KEY_BYTES} hex digits")
    return SnapshotKey(secret, str(path))


def new_key_text() -> str:
    return secrets.token_hex(KEY_BYTES)


def key_for_local_job(path: Path) -> SnapshotKey:
    """The key of a job run on this machine, kept with its other files under the work
    directory: the one in `path`, else a new one that the run writes there when it starts."""
    if path.exists():
        return read_key(path)
    return SnapshotKey(secrets.token_bytes(KEY_BYTES), str(path), unsaved=path)
