"""The StreamingJob CRD: a valid Kubernetes object, a schema the example manifest
passes, and the same defaults the operator applies when it reads a spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import jsonschema
import kubernetes_validate
import pytest
import yaml
from lockgate.operator.crd import render
from lockgate.operator.phase import JobPhase
from lockgate.operator.spec import SpecError, parse_spec
from lockgate.runtime.engine.restart import STRATEGIES
from lockgate.runtime.spec.manifest import load_manifest
from lockgate.runtime.spec.model import RestartType

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


class _RefusingDuplicates(yaml.SafeLoader):
    """YAML takes the last of two equal keys silently; an API server may refuse them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        duplicates = {key for key in keys if keys.count(key) > 1}
        assert not duplicates, f"line {node.start_mark.line + 1}: {sorted(duplicates)} given twice"
        return super().construct_mapping(node, deep=deep)


def test_the_crd_names_no_field_twice() -> None:
    """Failed before the fix: allowNonRestoredState was given twice."""
    yaml.load((REPO / "crds" / "streamingjob.yaml").read_text(), Loader=_RefusingDuplicates)


def test_the_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(CRD, KUBERNETES, strict=True)
    version = CRD["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert CRD["spec"]["names"]["shortNames"] == ["sj"]
    columns = {c["name"]: (c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]}
    assert columns == {  # `kubectl get sj`; Message only with -o wide
        "Phase": (".status.phase", 0),
        "Desired": (".spec.replicas", 0),
        "Running": (".status.replicas", 0),
        "Ready": ('.status.conditions[?(@.type=="Ready")].status', 0),
        "Last Checkpoint": (".status.lastCheckpoint.time", 0),
        "Last Savepoint": (".status.lastSavepoint.time", 0),
        "Age": (".metadata.creationTimestamp", 0),
        "Message": (".status.message", 1),
    }


def test_the_example_manifest_passes_the_schema_and_runs_locally() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "sums.yaml").read_text())
    jsonschema.validate(manifest, _schema())
    assert load_manifest(REPO / "examples" / "sums.yaml").spec.entrypoint == "examples.sums:build"


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


@pytest.mark.parametrize("copy", ["crds/streamingjob.yaml", "helm/lockgate/crds/streamingjob.yaml"])
def test_the_checked_in_crd_is_the_one_generated_from_the_model(copy: str) -> None:
    """The model is the one place a field, default, bound or description is written;
    run scripts/generate_crd.py after changing it."""
    assert (REPO / copy).read_text() == render(), f"{copy} is stale: run scripts/generate_crd.py"


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
"""The one `anyOf` a structural schema allows (the API server's isIntOrStringAnyOfPattern)."""


def _not_structural(node: dict[str, Any], where: str) -> list[str]:
    """What an API server refuses in a CRD's schema (its structural-schema rules the
    schema could break): each node typed unless it is an integer-or-string or
    free-form, no `$ref`, no `anyOf` but the exact integer-or-string one, no
    `properties` beside `additionalProperties`."""
    found = []
    int_or_string = node.get("x-kubernetes-int-or-string", False)
    if "$ref" in node or "$defs" in node:
        found.append(f"{where}: $ref")
    if int_or_string and ("type" in node or node.get("anyOf") != INT_OR_STRING):
        found.append(f"{where}: an integer-or-string takes no type and exactly anyOf {INT_OR_STRING}")
    if not int_or_string and "anyOf" in node:
        found.append(f"{where}: anyOf outside an integer-or-string")
    if "type" not in node and not int_or_string and not node.get("x-kubernetes-preserve-unknown-fields"):
        found.append(f"{where}: no type")
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{where}: properties and additionalProperties")
    for name, child in node.get("properties", {}).items():
        found += _not_structural(child, f"{where}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _not_structural(node[key], f"{where}[{key}]")
    return found


def test_the_crd_is_a_structural_schema_the_api_server_takes() -> None:
    """Failed before the fix: a duration's `anyOf` branches carried its pattern and
    bound, which an API server refuses ("type: Forbidden: must be empty to be
    structural"); they stand beside the branches now."""
    assert _not_structural(_schema(), "") == []


def test_a_duration_default_is_written_as_a_duration_the_api_server_takes() -> None:
    checkpointing = _schema()["properties"]["spec"]["properties"]["checkpointing"]["properties"]
    assert (checkpointing["interval"]["default"], checkpointing["timeout"]["default"]) == ("10s", "10m")
    for value in ("10s", "10m", 10, "1m30s"):
        jsonschema.validate(value, checkpointing["interval"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(0.5, checkpointing["interval"])


def _object_paths(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every object of the CRD's spec that has fixed fields (not free-form)."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or "properties" not in schema:
        return []
    paths = [path]
    for name, child in schema["properties"].items():
        paths += _object_paths(child, (*path, name))
    return paths


@pytest.mark.parametrize(
    "path", _object_paths(_schema()["properties"]["spec"]), ids=lambda p: ".".join(("spec", *p))
)
def test_an_unknown_field_is_refused_at_every_level_the_crd_fixes_its_fields(path: tuple[str, ...]) -> None:
    spec: dict[str, Any] = {"image": "lockgate:1", "job": {"entrypoint": "jobs.sums:build"}}
    node = spec
    for name in path:
        node = node.setdefault(name, {})
    node["unknownField"] = 1
    where = ".".join(("spec", *path, "unknownField"))
    with pytest.raises(SpecError, match=rf"{re.escape(where)} is not a field of"):
        parse_spec(spec)


def test_the_operator_requires_an_image() -> None:
    with pytest.raises(SpecError, match=r"spec\.image is required"):
        parse_spec({"job": {"entrypoint": "jobs.sums:build"}})


def test_the_models_restart_strategies_are_the_runtimes() -> None:
    assert get_args(RestartType) == STRATEGIES


def test_the_crds_phases_are_the_operators() -> None:
    phase = _schema()["properties"]["status"]["properties"]["phase"]
    assert phase["enum"] == [p.value for p in JobPhase]
