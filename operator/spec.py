"""A StreamingJob's spec as the operator reads it: the runtime's one model of the
spec (`lockgate.runtime.spec.model`, which `lockgate run job.yaml` reads
too; the CRD is generated from it), with its defaults applied, and what only a cluster needs: an image.

The API server applies the CRD's defaults; the model applies them again, so an
object written before a CRD upgrade, or served by a server that does not default,
reads the same. Errors name the field and what would be accepted.
"""

from __future__ import annotations

from typing import Any

from lockgate.runtime.spec.errors import SpecError
from lockgate.runtime.spec.model import Resources, RestartStrategySpec, StreamingJobSpec
from lockgate.runtime.spec.model import parse_spec as parse_any_spec

__all__ = [
    "REQUIRED_ON_A_CLUSTER",
    "Resources",
    "RestartStrategySpec",
    "SpecError",
    "StreamingJobSpec",
    "image_of",
    "parse_spec",
]

REQUIRED_ON_A_CLUSTER = ("image",)
"""Optional in the model (a local run has none), required by the CRD and `image_of`."""

_NO_IMAGE = "spec.image is required: the image with Python, Java 17, pyspark, lockgate and the job"


def parse_spec(spec: Any) -> StreamingJobSpec:
    """`spec` of a StreamingJob -> StreamingJobSpec; raises SpecError naming the field."""
    parsed = parse_any_spec(spec)
    image_of(parsed)
    return parsed


def image_of(spec: StreamingJobSpec) -> str:
    """The image a cluster runs the job in (optional in the model: a local run has none)."""
    if spec.image is None:
        raise SpecError(_NO_IMAGE)
    return spec.image
