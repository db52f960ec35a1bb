"""One grammar wherever a person types a duration (runtime/spec/durations.py):
the CRD's schema (what `kubectl apply` takes), a manifest `lockgate run` reads,
`lockgate run`'s flags, the operator's flags and the Helm chart's values all take
the same values, as the same number of seconds, and refuse the same."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from lockgate.operator.spec import SpecError, parse_spec
from lockgate.runtime.cli import parser as lockgate_parser
from lockgate.runtime.driver import option_types
from lockgate.runtime.spec.durations import DURATION_PATTERN, parse_duration
from lockgate.runtime.spec.manifest import ManifestError, load_manifest
from lockgate.runtime.spec.model import FieldKind, StreamingJobSpec, kind_of
from pydantic import BaseModel

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
        if child.get("x-kubernetes-int-or-string") and "(ns|us|ms|s|m|h)" in child.get("pattern", ""):
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


def _commands(parser: argparse.ArgumentParser, path: str = "lockgate") -> dict[str, argparse.ArgumentParser]:
    """Every command of `lockgate` (the operator's too: an entry point), by its name."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_commands(sub, f"{path} {name}"))
    return found


COMMANDS = _commands(lockgate_parser())
DURATION_TYPES = {option_types.seconds: 0.0, option_types.positive_seconds: None}
"""The grammar's argparse types, and what each takes for 0 (None: refused)."""
TIME_WORDS = re.compile(r"(timeout|interval|delay|wait|pause|target|age|period|ttl|grace)", re.IGNORECASE)
DURATION_ACTIONS = {
    f"{name} {action.option_strings[0]}": action
    for name, command in COMMANDS.items()
    for action in command._actions
    if action.type in DURATION_TYPES
}


def test_the_walk_finds_the_operator_and_every_command() -> None:
    assert {"lockgate run", "lockgate savepoint", "lockgate operator", "lockgate checkpoints"} <= set(
        COMMANDS
    )
    assert "lockgate savepoint --timeout" in DURATION_ACTIONS
    assert "lockgate run --exchange-timeout" in DURATION_ACTIONS
    assert "lockgate operator --observe-interval" in DURATION_ACTIONS


@pytest.mark.parametrize(
    ("command", "action"),
    [
        (name, action)
        for name, command in COMMANDS.items()
        for action in command._actions
        if action.option_strings
    ],
    ids=lambda x: x if isinstance(x, str) else x.option_strings[0],
)
def test_every_flag_that_takes_a_time_takes_it_in_the_one_grammar(
    command: str, action: argparse.Action
) -> None:
    """Failed before: `--exchange-timeout` took a float (`30s` refused, `inf` taken)."""
    assert action.type is not float, f"{command} {action.option_strings[0]} takes a bare float"
    names = " ".join([*action.option_strings, str(action.metavar or ""), action.dest])
    if TIME_WORDS.search(names) and action.nargs != 0 and action.type is not None:
        assert action.type in DURATION_TYPES or getattr(action.type, "__name__", "") == "parse", (
            f"{command} {action.option_strings[0]} looks like a time but takes {action.type}"
        )


@pytest.mark.parametrize("value", EVERY, ids=repr)
def test_every_duration_flag_of_every_command_takes_what_the_crd_takes(value: str) -> None:
    for flag, action in DURATION_ACTIONS.items():
        assert action.type is not None
        if value not in TAKEN:
            with pytest.raises(argparse.ArgumentTypeError, match="is not a duration like"):
                action.type(value)
        elif TAKEN[value] == 0 and DURATION_TYPES[action.type] is None:
            with pytest.raises(argparse.ArgumentTypeError, match="must be more than 0 seconds"):
                action.type(value)
        else:
            assert action.type(value) == pytest.approx(TAKEN[value]), flag


def _duration_fields(model: type[BaseModel], path: str = "spec") -> dict[str, FieldKind]:
    found: dict[str, FieldKind] = {}
    for name, field in model.model_fields.items():
        where = f"{path}.{field.alias or name}"
        annotation, kind = kind_of(field)
        if kind in ("duration", "positive duration"):
            found[where] = kind
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.update(_duration_fields(annotation, where))
    return found


MODEL_DURATIONS = _duration_fields(StreamingJobSpec)


def _with(path: str, value: object) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "lockgate:1", "job": {"entrypoint": "m:f"}}
    node = spec
    *parents, leaf = path.split(".")[1:]
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    if path == "spec.checkpointing.alignedCheckpointTimeout":
        node["timeout"] = "1000h"  # it must be below the checkpoint timeout: that one out of the way
    return spec


def test_the_walk_finds_every_duration_field_and_the_crd_has_the_same() -> None:
    assert len(MODEL_DURATIONS) >= 9, MODEL_DURATIONS
    assert set(MODEL_DURATIONS) == set(CRD_FIELDS)


@pytest.mark.parametrize("value", [*EVERY, 0, 10, 90, 0.5, True], ids=repr)
def test_every_duration_field_of_the_model_takes_what_the_crd_takes(value: object) -> None:
    """A plain number is seconds everywhere: in a flag, a quoted YAML value, and an
    unquoted whole one (`interval: 10`). Failed before: `interval: 10` was refused
    with a message saying a plain number is seconds."""
    schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, kind in MODEL_DURATIONS.items():
        seconds = TAKEN.get(value) if isinstance(value, str) else value
        at_least = 1.0 if path == "spec.savepoints.interval" else 0.0
        taken = (
            isinstance(value, int | str)
            and not isinstance(value, bool)
            and seconds is not None
            and (seconds > at_least if kind == "positive duration" else seconds >= at_least)
        )
        crd_takes = _matches(schema["properties"]["spec"], _with(path, value))
        if taken:
            assert parse_spec(_with(path, value)) is not None, path
        else:
            with pytest.raises(SpecError, match=re.escape(path)):
                parse_spec(_with(path, value))
        whole = isinstance(value, int) and not isinstance(value, bool)
        assert crd_takes == (whole or value in TAKEN), (path, value)
        assert crd_takes or not taken, f"{path}: the model takes {value!r}, the CRD refuses it"


def test_a_fractional_yaml_number_is_refused_saying_what_to_write() -> None:
    with pytest.raises(
        SpecError,
        match=r"spec\.checkpointing\.interval: a number here is whole seconds; got 0\.5: write it as a duration like 0\.5s",
    ):
        parse_spec(_with("spec.checkpointing.interval", 0.5))


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
