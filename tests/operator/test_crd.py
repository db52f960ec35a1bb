"""The StreamingJob CRD: a valid Kubernetes object, a schema the example manifest
passes, and the same defaults the operator applies when it reads a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from lockgate.operator.spec import parse_spec
from lockgate.runtime.driver.manifest import load_manifest

REPO = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((REPO / "crds" / "streamingjob.yaml").read_text())
KUBERNETES = "1.30.0"  # the oldest release whose CEL rules (fieldPath, transition rules) we use


def _schema() -> dict[str, Any]:
    (version,) = CRD["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server does with a structural schema's `default`s."""
    if schema.get("type") != "object" or not isinstance(value, dict):
        return value
    result = dict(value)
    for name, child in schema.get("properties", {}).items():
        if name not in result and "default" in child:
            result[name] = child["default"]
        if name in result:
            result[name] = _apply_defaults(child, result[name])
    return result


def test_the_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(CRD, KUBERNETES, strict=True)
    version = CRD["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert CRD["spec"]["names"]["shortNames"] == ["sj"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Replicas", "Last Checkpoint", "Age"]


def test_the_example_manifest_passes_the_schema_and_runs_locally() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "sums.yaml").read_text())
    jsonschema.validate(manifest, _schema())
    assert load_manifest(REPO / "examples" / "sums.yaml").entrypoint == "examples.sums:build"


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"job": {"entrypoint": "m:f"}}, "'image' is a required property"),
        ({"image": "i", "job": {"entrypoint": "not an entrypoint"}}, "does not match"),
        ({"image": "i", "job": {"entrypoint": "m:f"}, "replicas": 0}, "less than the minimum"),
        ({"image": "i", "job": {"entrypoint": "m:f"}, "upgradeMode": "rolling"}, "is not one of"),
        (
            {"image": "i", "job": {"entrypoint": "m:f"}, "checkpointing": {"interval": "soon"}},
            "does not match",
        ),
    ],
)
def test_the_schema_refuses_what_the_operator_could_not_run(spec: dict[str, Any], complaint: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        jsonschema.validate(
            {"apiVersion": "lockgate.dev/v1alpha1", "kind": "StreamingJob", "spec": spec}, _schema()
        )


def test_the_operator_applies_the_crds_defaults() -> None:
    minimal = {"image": "lockgate:1", "job": {"entrypoint": "jobs.sums:build"}}
    defaulted = _apply_defaults(_schema()["properties"]["spec"], minimal)
    assert defaulted != minimal, "the CRD has defaults to compare"
    assert parse_spec(defaulted) == parse_spec(minimal)
