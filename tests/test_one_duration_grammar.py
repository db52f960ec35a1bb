"""One grammar wherever a person types a duration (runtime/spec/durations.py):
the CRD's schema (what `kubectl apply` takes), a manifest `lockgate run` reads,
`lockgate run`'s flags, the operator's flags and the Helm chart's values all take
the same values, as the same number of seconds, and refuse the same."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from lockgate.operator.command import register as register_operator
from lockgate.operator.spec import SpecError, parse_spec
from lockgate.runtime.driver import add_job_options
from lockgate.runtime.spec.durations import DURATION_PATTERN, parse_duration
from lockgate.runtime.spec.manifest import ManifestError, load_manifest

REPO = Path(__file__).resolve().parents[1]
CRD = yaml.safe_load((REPO / "crds" / "streamingjob.yaml").read_text())
CHART_SCHEMA = json.loads((REPO / "helm" / "lockgate" / "values.schema.json").read_text())
CHART_VALUES = yaml.safe_load((REPO / "helm" / "lockgate" / "values.yaml").read_text())

TAKEN = {
    "0": 0.0,
    "30": 30.0,
    "0.5": 0.5,
    "500ms": 0.5,
    "10s": 10.0,
    "1m30s": 90.0,
    "1.5h": 5400.0,
    "2h": 7200.0,
    "1h2m3s4ms": 3723.004,
    "250us": 0.00025,
}
REFUSED = [
    "-1s",
    "+5s",
    "1d",
    "nan",
    "inf",
    "1e3s",
    " 5s",
    "5s ",
    "",
    "5 s",
    "1m30",
    ".5s",
    "s",
    "10S",
    "1h-5m",
    "٣s",
]
EVERY = [*TAKEN, *REFUSED]


def _crd_duration_fields(schema: dict[str, Any], path: str = "") -> dict[str, str]:
    fields = {}
    for name, child in schema.get("properties", {}).items():
        if "pattern" in child and any(unit in child["pattern"] for unit in ("ms|", "(ms")):
            fields[f"{path}{name}"] = child["pattern"]
        fields.update(_crd_duration_fields(child, f"{path}{name}."))
    return fields


CRD_FIELDS = _crd_duration_fields(CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_every_duration_field_of_the_crd_has_the_one_pattern() -> None:
    assert len(CRD_FIELDS) >= 7, CRD_FIELDS
    assert set(CRD_FIELDS.values()) == {DURATION_PATTERN}, CRD_FIELDS


@pytest.mark.parametrize("value", EVERY, ids=repr)
def test_the_crd_the_parser_and_the_chart_agree(value: str) -> None:
    taken = value in TAKEN
    crd = _matches({"type": "string", "pattern": DURATION_PATTERN}, value)
    chart = _matches(CHART_SCHEMA["definitions"]["duration"], value)
    assert (crd, chart) == (taken, taken)
    if taken:
        assert parse_duration(value) == pytest.approx(TAKEN[value])
    else:
        with pytest.raises(ValueError, match="is not a duration like 500ms, 10s, 1m30s or 2h"):
            parse_duration(value)


@pytest.mark.parametrize("value", EVERY, ids=repr)
def test_a_manifest_and_the_operator_read_a_duration_as_the_crd_takes_it(value: str, tmp_path: Path) -> None:
    spec = {
        "image": "lockgate:1",
        "job": {"entrypoint": "tests.jobs.configurable:word_count"},
        "checkpointing": {"minPause": value},
    }
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump({"kind": "StreamingJob", "metadata": {"name": "j"}, "spec": spec}))
    if value in TAKEN:
        assert parse_spec(spec).checkpointing.min_pause_s == pytest.approx(TAKEN[value])
        assert load_manifest(manifest).spec.checkpointing.min_pause_s == pytest.approx(TAKEN[value])
    else:
        with pytest.raises(SpecError, match=r"spec\.checkpointing\.minPause: .* is not a duration"):
            parse_spec(spec)
        with pytest.raises(ManifestError, match=r"spec\.checkpointing\.minPause: .* is not a duration"):
            load_manifest(manifest)


@pytest.mark.parametrize("value", EVERY, ids=repr)
def test_lockgate_run_and_the_operator_take_a_duration_flag_as_the_crd_takes_it(value: str) -> None:
    run = argparse.ArgumentParser()
    add_job_options(run)
    operator = argparse.ArgumentParser()
    register_operator(operator.add_subparsers())
    parsed = {
        "--min-pause": _parsed(
            run, ["tests.jobs.configurable:word_count", "--min-pause", value], "min_pause"
        ),
        "--observe-interval": _parsed(
            operator, ["operator", "--observe-interval", value], "observe_interval"
        ),
    }
    if value not in TAKEN:
        assert parsed == {"--min-pause": None, "--observe-interval": None}
    elif TAKEN[value] == 0:  # the operator's interval must be more than 0
        assert parsed == {"--min-pause": 0.0, "--observe-interval": None}
    else:
        assert parsed == {
            "--min-pause": pytest.approx(TAKEN[value]),
            "--observe-interval": pytest.approx(TAKEN[value]),
        }


def test_a_duration_beyond_any_lockgate_takes_is_refused_saying_so() -> None:
    """The pattern cannot bound a number; the parser (and so the operator's reading
    of a spec) does."""
    with pytest.raises(ValueError, match="'99999999999999999h' is longer than any duration Lockgate takes"):
        parse_duration("99999999999999999h")
    with pytest.raises(ValueError, match="longer than any duration"):
        parse_duration("1" * 30)


@pytest.mark.parametrize("value", ["1ns", "0.4us", "0.0000001"])
def test_a_duration_shorter_than_a_microsecond_is_refused_not_read_as_0(value: str) -> None:
    """Counted in microseconds, it was 0, which means "none" where 0 does
    (`--in-flight-target 1ns` asked for the tightest latency and got full frames)."""
    with pytest.raises(ValueError, match="is shorter than 1us, the shortest duration Lockgate takes"):
        parse_duration(value)


def test_the_charts_prometheus_windows_are_durations_prometheus_and_lockgate_both_read() -> None:
    """Alert windows and the scrape interval go to Prometheus, which reads no
    fractions and no plain numbers: the chart takes the part of the grammar both read."""
    windows = CHART_SCHEMA["definitions"]["prometheusDuration"]
    for value in ("15m", "1h30m", "30s", "500ms"):
        assert _matches(windows, value)
        parse_duration(value)
    for value in ("1.5h", "30", "1d", "0.5m"):
        assert not _matches(windows, value)
    monitoring = CHART_VALUES["monitoring"]
    for value in (
        monitoring["scrapeInterval"],
        *(v for k, v in monitoring["alerts"].items() if "Window" in k),
    ):
        assert _matches(windows, value), value
    assert parse_duration(CHART_VALUES["operator"]["observeInterval"]) == 5.0


def _matches(schema: dict[str, Any], value: str) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def _parsed(parser: argparse.ArgumentParser, argv: list[str], name: str) -> float | None:
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            value: float = getattr(parser.parse_args(argv), name)
        except SystemExit:
            return None
    return value
