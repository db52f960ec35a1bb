"""Durations wherever a person types one: a StreamingJob, the command line, the
operator's flags and the Helm chart. One grammar, Go's and Kubernetes' (`500ms`,
`10s`, `1m30s`, `1.5h`; units ns, us, ms, s, m, h), where a plain number is seconds
(`30`, `0.5`). No sign, no `nan` or `inf`, no days: DURATION_PATTERN is that
grammar, written into the CRD's and the chart's schemas, so that a value
`kubectl apply` or `helm install` takes is one every command takes. durationpy
computes the value."""

from __future__ import annotations

import re

import durationpy

_NUMBER = r"[0-9]+(\.[0-9]+)?"
DURATION_PATTERN = rf"^({_NUMBER}|({_NUMBER}(ns|us|ms|s|m|h))+)$"
_DURATION = re.compile(DURATION_PATTERN)
_PLAIN_SECONDS = re.compile(rf"^{_NUMBER}$")
EXAMPLES = "500ms, 10s, 1m30s or 2h (a plain number is seconds)"


def parse_duration(text: str) -> float:
    """Seconds; raises ValueError saying what a duration looks like."""
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration like {EXAMPLES}")
    with_unit = f"{text}s" if _PLAIN_SECONDS.match(text) else text
    try:
        seconds = float(durationpy.from_str(with_unit).total_seconds())
    except durationpy.DurationError:
        raise ValueError(f"{text!r} is longer than any duration Lockgate takes") from None
    if seconds == 0 and any(digit in text for digit in "123456789"):
        # Counted in microseconds: read as 0, it would mean "none" where 0 does.
        raise ValueError(f"{text!r} is shorter than 1us, the shortest duration Lockgate takes")
    return seconds


def positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"must be more than 0 seconds, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """`seconds` in the grammar, the largest units first (600 -> `10m`, 90 -> `1m30s`,
    0.5 -> `500ms`, 0 -> `0s`): how the CRD writes a default."""
    micros = round(seconds * 1_000_000)
    if micros == 0:
        return "0s"
    text = ""
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1000), ("us", 1)):
        count, micros = divmod(micros, size)
        text += f"{count}{unit}" if count else ""
    return text
