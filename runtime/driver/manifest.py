"""Reading a `StreamingJob` manifest for `lockgate run job.yaml`: the same file
`kubectl apply` takes, checked by the same model the operator reads it with."""

from __future__ import annotations

from pathlib import Path

import yaml
from lockgate.runtime.driver.spec_errors import SpecError
from lockgate.runtime.driver.streaming_job import KIND, StreamingJobManifest, read_manifest


class ManifestError(ValueError):
    """The manifest is not a StreamingJob Lockgate can run; the message says where."""


def load_manifest(path: Path) -> StreamingJobManifest:
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: cannot be read: {error}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: a manifest is a mapping (kind, metadata, spec); got {document!r}")
    if document.get("kind") != KIND:
        raise ManifestError(f"{path}: kind is {document.get('kind')!r}; lockgate run takes a {KIND}")
    try:
        return read_manifest(document)
    except SpecError as error:
        raise ManifestError(f"{path}: {error}") from None
