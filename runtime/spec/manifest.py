"""Reading a `StreamingJob` manifest for `lockgate run job.yaml`: the same file
`kubectl apply` takes, checked by the same model the operator reads it with."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime.spec.errors import SpecError
from lockgate.runtime.spec.model import KIND, StreamingJobManifest, read_manifest


class ManifestError(ValueError):
    """The manifest is not a StreamingJob Lockgate can run; the message says where."""


def load_manifest(path: Path) -> StreamingJobManifest:
    # Imported here: only a run from a manifest reads YAML (PyYAML adds 20-30 ms to every start).
    from lockgate.runtime.spec.unique_keys import DuplicateKeyError, YAMLError, load_yaml  # noqa: PLC0415

    try:
        document = load_yaml(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: cannot be read: {error}") from None
    except DuplicateKeyError as error:
        raise ManifestError(f"{path}: {error}") from None
    except YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: a manifest is a mapping (kind, metadata, spec); got {document!r}")
    if document.get("kind") != KIND:
        raise ManifestError(f"{path}: kind is {document.get('kind')!r}; lockgate run takes a {KIND}")
    try:
        return read_manifest(document)
    except SpecError as error:
        raise ManifestError(f"{path}: {error}") from None
