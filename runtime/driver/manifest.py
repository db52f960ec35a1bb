"""Reading a `StreamingJob` manifest for `lockgate run job.yaml`: the same file
`kubectl apply` takes, run locally. Command-line flags override its values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_DURATION = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class ManifestError(ValueError):
    """The manifest is not a StreamingJob Lockgate can run; the message says where."""


@dataclass(frozen=True)
class ManifestJob:
    entrypoint: str
    name: str
    namespace: str = "default"
    args: dict[str, str] = field(default_factory=dict)
    replicas: int | None = None
    max_parallelism: int | None = None
    state_backend: str | None = None
    interval_s: float | None = None
    mode: str | None = None


def duration_s(value: Any, where: str) -> float:
    """`30`, `30s`, `500ms`, `2m`, `1h` -> seconds."""
    match = _DURATION.match(str(value).strip())
    if match is None:
        raise ManifestError(f"{where}: {value!r} is not a duration like 30s, 500ms, 2m or 1h")
    return float(match["value"]) * _UNITS[match["unit"]]


def _mapping(data: Any, where: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ManifestError(f"{where} must be a mapping, got {type(data).__name__}")
    return data


def load_manifest(path: Path) -> ManifestJob:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from error
    document = _mapping(document, str(path))
    if document.get("kind") != "StreamingJob":
        raise ManifestError(f"{path}: kind is {document.get('kind')!r}; lockgate run takes a StreamingJob")
    metadata = _mapping(document.get("metadata"), f"{path}: metadata")
    spec = _mapping(document.get("spec"), f"{path}: spec")
    job = _mapping(spec.get("job"), f"{path}: spec.job")
    if "entrypoint" not in job:
        raise ManifestError(f"{path}: spec.job.entrypoint (module:function) is required")
    if "name" not in metadata:
        raise ManifestError(f"{path}: metadata.name is required")
    checkpointing = _mapping(spec.get("checkpointing"), f"{path}: spec.checkpointing")
    interval = checkpointing.get("interval")
    args = _mapping(job.get("args"), f"{path}: spec.job.args")
    return ManifestJob(
        entrypoint=str(job["entrypoint"]),
        name=str(metadata["name"]),
        namespace=str(metadata.get("namespace", "default")),
        args={str(k): str(v) for k, v in args.items()},
        replicas=None if spec.get("replicas") is None else int(spec["replicas"]),
        max_parallelism=None if spec.get("maxParallelism") is None else int(spec["maxParallelism"]),
        state_backend=spec.get("stateBackend"),
        interval_s=None if interval is None else duration_s(interval, f"{path}: spec.checkpointing.interval"),
        mode=checkpointing.get("mode"),
    )
