"""Durations as a StreamingJob and the command line write them: `30`, `30s`, `500ms`,
`2m`, `1h` (a bare number is seconds). No sign, no `nan`, no `inf`: the pattern is
the CRD's, so a value `kubectl apply` takes is one `lockgate run` takes."""

from __future__ import annotations

import re

DURATION_PATTERN = r"^\d+(\.\d+)?(ms|s|m|h)?$"
_DURATION = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?$")
_SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds; raises ValueError saying what a duration looks like."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 500ms, 2m or 1h")
    return float(match["value"]) * _SECONDS_PER_UNIT[match["unit"]]


def positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"must be more than 0 seconds, got {text!r}")
    return seconds
